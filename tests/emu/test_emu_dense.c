/*
 * test_emu_dense.c - a device receiver's dense and put kinds
 * (engine/devdense.c) byte-compared with the CPU codec, on the emulated
 * CUDA runtime (cuda_emu_rt.h: device memory host code must not touch):
 * XOR_DENSE and PUT_DENSE payloads for w = 1, 2, 4, 8 in each values
 * encoding (raw, zstd, rANS, byte planes: kernels/codec.h
 * dc_codec_force_kind, entropy.h dc_ent_val_force) decoded and applied on
 * the device against dc_codec_decode; PUT_DENSE's device undo copy gives
 * the baseline back; every truncation step and many bit flips (and bad
 * encoding fields) get the CPU's verdict with the chunk untouched.
 * PUT_SPARSE's new words made XOR words on the device
 * (dc_devdense_put_to_xor) apply to the CPU's result and their undo record
 * gives the baseline back.
 *
 * DELTACAST_TEST_REAL_CUDA=1 (perf/gpu-check.sh): the same tests on the
 * GPU's runtime when one is usable (the first line of stderr says which).
 */
#include <criterion/criterion.h>

#include "engine/devdense.h"
#include "engine/devpath.h"
#include "engine/layout.h"
#include "kernels/codec.h"
#include "kernels/entropy.h"
#include "kernels/kern_cuda.h"

#include "cuda_emu_rt.h"
#include "emu_pnode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_real;
static void setup(void)
{
    const char *r = getenv("DELTACAST_TEST_REAL_CUDA");
    g_real = r && strcmp(r, "1") == 0 && dc_kern_cuda_available();
    if (!g_real)
        dc_emu_install();
    fprintf(stderr, "emu_dense: %s CUDA runtime\n", g_real ? "the GPU's" : "the emulated");
}
static void teardown(void)
{
    dc_codec_force_kind = 0;
    dc_ent_val_force = -1;
}
TestSuite(emu_dense, .init = setup, .fini = teardown);

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A baseline of small-magnitude words (their high bytes mostly 0 or 0xff:
 * the coders have something to gain) and a target with `pct` percent of
 * its elements changed in their low bytes. */
static void make_pair(uint8_t *base, uint8_t *next, size_t n, unsigned w, unsigned pct)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rnd();
        int64_t v = (int64_t)(r % 201) - 100;
        for (unsigned b = 0; b < w; b++)
            base[i * w + b] = (uint8_t)((uint64_t)v >> (8 * b));
    }
    memcpy(next, base, n * w);
    for (size_t i = 0; i < n; i++)
        if (rnd() % 100 < pct)
            next[i * w] ^= (uint8_t)(1 + rnd() % 255);
}

static const unsigned methods[] = {DC_ENT_RAW, DC_ENT_ZSTD, DC_ENT_RANS, DC_ENT_PLANES};

typedef struct {
    dc_node_t *node;
    dc_devdense_t dd;
    size_t n;
    unsigned w;
    uint8_t *base, *next, *pay, *bad, *want, *back;
    uint8_t *dchunk;
} fix_t;

static void fix_open(fix_t *f, size_t n, unsigned w)
{
    memset(f, 0, sizeof(*f));
    f->n = n;
    f->w = w;
    size_t bytes = n * w, cap = dc_codec_payload_bound(bytes);
    f->node = calloc(1, sizeof(*f->node));
    cr_assert_eq(dc_codec_create(bytes, &f->node->rx.codec), DC_OK);
    f->base = malloc(bytes);
    f->next = malloc(bytes);
    f->want = malloc(bytes);
    f->back = malloc(bytes);
    f->pay = malloc(cap);
    f->bad = malloc(cap);
    cr_assert_eq(dc_kern_cuda_malloc((void **)&f->dchunk, bytes), DC_OK);
}

static void fix_close(fix_t *f)
{
    dc_devdense_close(&f->dd);
    dc_kern_cuda_free(f->dchunk);
    dc_codec_free(f->node->rx.codec);
    free(f->node);
    free(f->base);
    free(f->next);
    free(f->want);
    free(f->back);
    free(f->pay);
    free(f->bad);
}

/* The device's verdict on payload p (len) against the CPU's, the chunk
 * (the baseline) untouched when refused, the CPU's bytes when accepted.
 * copy: ask for the undo copy (PUT_DENSE in delta mode); it must hold the
 * baseline and restore it.  Returns the CPU's status. */
static dc_status_t check_one(fix_t *f, uint16_t enc, const uint8_t *p, size_t len, int copy)
{
    const size_t bytes = f->n * f->w;
    memcpy(f->want, f->base, bytes);
    dc_status_t cs = dc_codec_decode(f->node->rx.codec, enc, p, len, f->want, f->n, f->w);
    cr_assert(cs == DC_OK || cs == DC_ERR_FORMAT, "cpu: %s", dc_last_error());
    char cerr[256];
    snprintf(cerr, sizeof(cerr), "%s", dc_last_error());
    cr_assert_eq(dc_kern_cuda_h2d(f->dchunk, f->base, bytes), DC_OK);
    void *cp = NULL;
    uint64_t sent = 0;
    int r = dc_devdense_apply(f->node, &f->dd, 0, enc, p, len, 0, f->dchunk, f->n, f->w,
                              copy ? &cp : NULL, &sent);
    cr_assert_eq(dc_kern_cuda_d2h(f->back, f->dchunk, bytes), DC_OK);
    if (cs != DC_OK) {
        cr_assert_eq(r, DC_DEV_BAD, "enc 0x%04x len %zu: the CPU refused (%s), the device said %d",
                     enc, len, cerr, r);
        cr_assert_null(cp);
        cr_assert_eq(memcmp(f->back, f->base, bytes), 0, "refused, but the chunk changed");
        return cs;
    }
    cr_assert_eq(r, DC_DEV_DONE, "enc 0x%04x len %zu: the CPU accepted, the device: %s", enc, len,
                 dc_last_error());
    cr_assert_eq(memcmp(f->back, f->want, bytes), 0, "enc 0x%04x w %u: device bytes differ", enc,
                 f->w);
    cr_assert_leq(sent, dc_enc_val_method(enc) == DC_ENT_ZSTD ? bytes : len);
    if (copy) {
        cr_assert_not_null(cp);
        cr_assert_eq(dc_devdense_restore(f->dchunk, cp, bytes), DC_OK);
        cr_assert_eq(dc_kern_cuda_d2h(f->back, f->dchunk, bytes), DC_OK);
        cr_assert_eq(memcmp(f->back, f->base, bytes), 0, "the undo copy is not the baseline");
        dc_kern_cuda_free(cp);
    }
    return cs;
}

static void dense_case(unsigned kind, unsigned w, size_t n, unsigned pct, int hostile)
{
    fix_t f;
    fix_open(&f, n, w);
    size_t bytes = n * w, cap = dc_codec_payload_bound(bytes);
    for (size_t mi = 0; mi < DC_ARRAY_SIZE(methods); mi++) {
        unsigned m = methods[mi];
        if ((m == DC_ENT_RANS && w > 2) || (m == DC_ENT_PLANES && w < 2))
            continue;
        make_pair(f.base, f.next, n, w, pct);
        dc_codec_force_kind = kind;
        dc_ent_val_force = (int)m;
        size_t len;
        uint16_t enc;
        cr_assert_eq(dc_codec_encode(f.node->rx.codec, f.base, f.next, n, w, f.pay, cap, &len,
                                     &enc, NULL),
                     DC_OK, "%s", dc_last_error());
        dc_codec_force_kind = 0;
        dc_ent_val_force = -1;
        cr_assert_eq(dc_enc_kind(enc), kind, "forced kind %u, got %u", kind, dc_enc_kind(enc));
        cr_assert_eq(dc_enc_val_method(enc), m, "forced values method %u, got %u (w %u)", m,
                     dc_enc_val_method(enc), w);
        cr_assert_eq(check_one(&f, enc, f.pay, len, 0), DC_OK);
        cr_assert_eq(memcmp(f.back, f.next, bytes), 0, "not the target");
        if (kind == DC_ENC_PUT_DENSE)
            check_one(&f, enc, f.pay, len, 1);
        if (!hostile)
            continue;
        /* truncations */
        for (size_t cut = 0; cut < len; cut += 1 + len / 23)
            cr_assert_eq(check_one(&f, enc, f.pay, cut, kind == DC_ENC_PUT_DENSE), DC_ERR_FORMAT,
                         "truncated to %zu of %zu", cut, len);
        /* bit flips (the verdict may be either: the device must agree) */
        for (int k = 0; k < 32 && len > 0; k++) {
            memcpy(f.bad, f.pay, len);
            f.bad[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
            check_one(&f, enc, f.bad, len, kind == DC_ENC_PUT_DENSE && (k & 1));
        }
        /* trailing bytes, bad encoding fields */
        memcpy(f.bad, f.pay, len);
        f.bad[len] = 0;
        cr_assert_eq(check_one(&f, enc, f.bad, len + 1, 0), DC_ERR_FORMAT);
        cr_assert_eq(check_one(&f, dc_enc_make(kind, DC_ENT_GOLOMB, m), f.pay, len, 0),
                     DC_ERR_FORMAT);
        cr_assert_eq(check_one(&f, dc_enc_make(kind, 0, DC_ENT_GOLOMB), f.pay, len, 0),
                     DC_ERR_FORMAT);
        /* another values method than the stream's */
        unsigned other = m == DC_ENT_RAW ? DC_ENT_PLANES : DC_ENT_RAW;
        check_one(&f, dc_enc_make(kind, 0, other), f.pay, len, 0);
    }
    fix_close(&f);
}

Test(emu_dense, xor_dense_every_width_and_values_encoding, .timeout = 60)
{
    static const unsigned widths[] = {1, 2, 4, 8};
    for (size_t k = 0; k < DC_ARRAY_SIZE(widths); k++) {
        dense_case(DC_ENC_XOR_DENSE, widths[k], 4099, 40, 0);
        dense_case(DC_ENC_XOR_DENSE, widths[k], 1000, 100, 1);
    }
}

Test(emu_dense, put_dense_every_width_and_values_encoding_with_undo_copy, .timeout = 60)
{
    static const unsigned widths[] = {1, 2, 4, 8};
    for (size_t k = 0; k < DC_ARRAY_SIZE(widths); k++) {
        dense_case(DC_ENC_PUT_DENSE, widths[k], 4099, 40, 0);
        dense_case(DC_ENC_PUT_DENSE, widths[k], 1000, 100, 1);
    }
}

/* PUT_SPARSE: the CPU's lists (positions, new words) on the device, made
 * XOR words there against the chunk: applied they give the CPU's result,
 * the undo record applied again the baseline. */
Test(emu_dense, put_sparse_words_and_undo_record, .timeout = 60)
{
    static const unsigned widths[] = {1, 2, 4, 8};
    for (size_t k = 0; k < DC_ARRAY_SIZE(widths); k++) {
        for (int with_rec = 0; with_rec < 2; with_rec++) {
            unsigned w = widths[k];
            size_t n = 5003, bytes = n * w, cap = dc_codec_payload_bound(bytes), len;
            fix_t f;
            fix_open(&f, n, w);
            make_pair(f.base, f.next, n, w, 10);
            dc_codec_force_kind = DC_ENC_PUT_SPARSE;
            uint16_t enc;
            cr_assert_eq(dc_codec_encode(f.node->rx.codec, f.base, f.next, n, w, f.pay, cap,
                                         &len, &enc, NULL),
                         DC_OK);
            dc_codec_force_kind = 0;
            cr_assert_eq(dc_enc_kind(enc), DC_ENC_PUT_SPARSE);
            const uint32_t *pos;
            const uint8_t *words;
            size_t count;
            cr_assert_eq(dc_codec_decode_lists(f.node->rx.codec, enc, f.pay, len, n, w, &pos,
                                               &words, &count),
                         DC_OK, "%s", dc_last_error());
            cr_assert_gt(count, 0);
            uint32_t *dpos;
            uint8_t *dw;
            cr_assert_eq(dc_kern_cuda_malloc((void **)&dpos, count * 4), DC_OK);
            cr_assert_eq(dc_kern_cuda_malloc((void **)&dw, count * w), DC_OK);
            cr_assert_eq(dc_kern_cuda_h2d(dpos, pos, count * 4), DC_OK);
            cr_assert_eq(dc_kern_cuda_h2d(dw, words, count * w), DC_OK);
            cr_assert_eq(dc_kern_cuda_h2d(f.dchunk, f.base, bytes), DC_OK);
            void *rec = NULL;
            cr_assert_eq(dc_devdense_put_to_xor(&f.dd, f.dchunk, w, dpos, dw, count,
                                                with_rec ? &rec : NULL),
                         DC_OK, "%s", dc_last_error());
            cr_assert_eq(dc_kern_cuda_xor_scatter(f.dchunk, n, w, dpos, dw, count, NULL), DC_OK);
            cr_assert_eq(dc_kern_cuda_d2h(f.back, f.dchunk, bytes), DC_OK);
            cr_assert_eq(memcmp(f.back, f.next, bytes), 0, "w %u: put-sparse on the device", w);
            if (with_rec) {
                cr_assert_not_null(rec);
                cr_assert_eq(dc_kern_cuda_xor_scatter(
                                 f.dchunk, n, w, rec,
                                 (uint8_t *)rec + dc_devdense_undo_wofs(count), count, NULL),
                             DC_OK);
                cr_assert_eq(dc_kern_cuda_d2h(f.back, f.dchunk, bytes), DC_OK);
                cr_assert_eq(memcmp(f.back, f.base, bytes), 0, "w %u: undo record", w);
                dc_kern_cuda_free(rec);
            }
            dc_kern_cuda_free(dpos);
            dc_kern_cuda_free(dw);
            fix_close(&f);
        }
    }
}

/* --- the whole device path of one chunk (engine/devpath.c) --------------- */

/* Payload pl (len, encoding enc) through the device path against the CPU's
 * dc_codec_decode on the baseline: the same verdict, the chunk untouched
 * when refused, the CPU's bytes when accepted; with delta, the device undo
 * record / copy (put kinds) gives the baseline back.  Returns the CPU's
 * status. */
static dc_status_t pnode_check(pnode_t *p, uint16_t enc, const uint8_t *pl, size_t len,
                               int delta)
{
    memcpy(p->want, p->base, p->bytes);
    dc_status_t cs = dc_codec_decode(p->n->rx.codec, enc, pl, len, p->want, p->n_el, p->w);
    cr_assert(cs == DC_OK || cs == DC_ERR_FORMAT, "cpu: %s", dc_last_error());
    char cerr[256];
    snprintf(cerr, sizeof(cerr), "%s", dc_last_error());
    cr_assert_eq(dc_kern_cuda_h2d(p->dchunk, p->base, p->bytes), DC_OK);
    int r = dc_devpath_apply_test(p->n, 0, enc, pl, len, delta);
    cr_assert_eq(dc_kern_cuda_d2h(p->back, p->dchunk, p->bytes), DC_OK);
    if (cs != DC_OK) {
        cr_assert_eq(r, DC_DEV_BAD, "enc 0x%04x len %zu: the CPU refused (%s), the device %d",
                     enc, len, cerr, r);
        cr_assert_eq(memcmp(p->back, p->base, p->bytes), 0, "refused, but the chunk changed");
        cr_assert(!dc_devpath_has_undo(p->n, 0));
        return cs;
    }
    cr_assert_eq(r, DC_DEV_DONE, "enc 0x%04x len %zu: the CPU accepted, the device: %s", enc,
                 len, dc_last_error());
    cr_assert_eq(memcmp(p->back, p->want, p->bytes), 0, "enc 0x%04x w %u: bytes differ", enc,
                 p->w);
    unsigned kind = dc_enc_kind(enc);
    if (delta && (kind == DC_ENC_PUT_SPARSE || kind == DC_ENC_PUT_DENSE)) {
        cr_assert(dc_devpath_has_undo(p->n, 0), "no device undo record");
        cr_assert_eq(dc_devpath_has_copy(p->n, 0), kind == DC_ENC_PUT_DENSE);
        cr_assert_eq(dc_devpath_undo(p->n, 0), DC_DEV_DONE, "%s", dc_last_error());
        cr_assert_eq(dc_kern_cuda_d2h(p->back, p->dchunk, p->bytes), DC_OK);
        cr_assert_eq(memcmp(p->back, p->base, p->bytes), 0, "the undo is not the baseline");
    }
    dc_devpath_forget(p->n);
    return cs;
}

/* Every kind but ctx (tests/emu/test_emu_ctx.c) in each values encoding,
 * Golomb and gaps positions for the sparse ones, through the device path;
 * truncations and bit flips get the CPU's verdict. */
Test(emu_dense, every_kind_through_the_device_path_hostile, .timeout = 60)
{
    static const unsigned widths[] = {1, 2, 4, 8};
    static const unsigned kinds[] = {DC_ENC_PUT_SPARSE, DC_ENC_XOR_SPARSE, DC_ENC_XOR_DENSE,
                                     DC_ENC_PUT_DENSE};
    unsigned tried = 0;
    for (size_t wi = 0; wi < DC_ARRAY_SIZE(widths); wi++) {
        const unsigned w = widths[wi];
        const size_t n = 3001, bytes = n * w, cap = dc_codec_payload_bound(bytes);
        pnode_t p;
        pnode_open(&p, n, w);
        uint8_t *next = malloc(bytes), *pay = malloc(cap), *bad = malloc(cap);
        for (size_t ki = 0; ki < DC_ARRAY_SIZE(kinds); ki++)
            for (size_t mi = 0; mi < DC_ARRAY_SIZE(methods); mi++)
                for (unsigned gaps = 0; gaps < 2; gaps++) {
                    const unsigned kind = kinds[ki], m = methods[mi];
                    const int sparse = kind == DC_ENC_PUT_SPARSE || kind == DC_ENC_XOR_SPARSE;
                    if ((m == DC_ENT_RANS && w > 2) || (m == DC_ENT_PLANES && w < 2) ||
                        (gaps && !sparse))
                        continue;
                    make_pair(p.base, next, n, w, sparse ? 20 : 60);
                    dc_codec_force_kind = kind;
                    dc_ent_val_force = (int)m;
                    dc_codec_pos_method = gaps ? DC_ENT_GAPS : DC_ENT_GOLOMB;
                    size_t len;
                    uint16_t enc;
                    dc_status_t es = dc_codec_encode(p.n->rx.codec, p.base, next, n, w, pay, cap,
                                                     &len, &enc, NULL);
                    dc_codec_force_kind = 0;
                    dc_ent_val_force = -1;
                    dc_codec_pos_method = 0;
                    cr_assert_eq(es, DC_OK, "%s", dc_last_error());
                    cr_assert_eq(dc_enc_kind(enc), kind);
                    if (dc_enc_val_method(enc) != m)
                        continue; /* (zstd needs >= 2 KiB of sparse words) */
                    tried++;
                    cr_assert_eq(pnode_check(&p, enc, pay, len, 1), DC_OK);
                    if (kind == DC_ENC_PUT_SPARSE || kind == DC_ENC_PUT_DENSE)
                        cr_assert_eq(memcmp(p.back, p.base, bytes), 0, "not undone");
                    cr_assert_eq(pnode_check(&p, enc, pay, len, 0), DC_OK);
                    cr_assert_eq(memcmp(p.back, next, bytes), 0, "not the target");
                    for (size_t cut = 0; cut < len; cut += 1 + len / 7)
                        cr_assert_eq(pnode_check(&p, enc, pay, cut, (int)(cut & 1)),
                                     DC_ERR_FORMAT, "truncated to %zu of %zu", cut, len);
                    for (int k = 0; k < 10 && len > 0; k++) {
                        memcpy(bad, pay, len);
                        bad[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
                        pnode_check(&p, enc, bad, len, k & 1);
                    }
                    /* another kind's or method's view of the same bytes */
                    pnode_check(&p, dc_enc_make(kind, dc_enc_pos_method(enc),
                                                m == DC_ENT_RAW ? DC_ENT_PLANES : DC_ENT_RAW),
                                pay, len, 0);
                    pnode_check(&p, dc_enc_make(kind, sparse ? 0 : DC_ENT_GOLOMB, m), pay, len,
                                0);
                }
        free(next);
        free(pay);
        free(bad);
        pnode_close(&p);
    }
    fprintf(stderr, "emu_dense: %u payloads through the device path\n", tried);
    cr_assert_gt(tried, 40);
}
