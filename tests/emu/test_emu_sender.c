/*
 * test_emu_sender.c - a device sender's encode (engine/devsend.c) on the
 * emulated CUDA runtime: the payloads are byte-identical to the CPU
 * encoder's (dc_codec_encode_digest) on random chunks (w 1, 2, 4, 8; 0, 1,
 * 10, 30% changed; the ctx and order0 models; baseline in device memory,
 * and for w 4, 8 streamed from the host), the device sender's kernels match their
 * CPU references (sample histogram, class ranks), dense chunks are handed
 * back for staging, and only lists cross the emulated PCIe.
 */
#include <criterion/criterion.h>

#include "cuda_emu_rt.h"
#include "emu_pnode.h"
#include "engine/devsend.h"
#include "kernels/ctx.h"
#include "kernels/digest.h"
#include "kernels/entropy.h"
#include "kernels/kern_cuda.h"
#include "kernels/kern_cuda_ops.h"
#include "kernels/kern_isa.h"
#include "kernels/listpack.h"
#include "kernels/safetensors.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* DELTACAST_TEST_REAL_CUDA=1 (perf/gpu-check.sh): the same tests on the
 * GPU's runtime when one is usable (bytes then as the library counts its
 * h2d / d2h calls: the lists and the stream, not the kernels' results). */
static int g_real;
static void setup(void)
{
    const char *r = getenv("DELTACAST_TEST_REAL_CUDA");
    g_real = r && strcmp(r, "1") == 0 && dc_kern_cuda_available();
    if (g_real)
        fprintf(stderr, "emu_sender: the GPU's CUDA runtime\n");
    else
        dc_emu_install();
}
TestSuite(emu_sender, .init = setup);

static void pcie_now(uint64_t *h2d, uint64_t *d2h)
{
    if (g_real)
        dc_kern_cuda_pcie(h2d, d2h);
    else
        dc_emu_pcie(h2d, d2h);
}

static uint64_t rng_s = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return rng_s;
}

static uint64_t get_word(const uint8_t *p, unsigned w)
{
    uint64_t v = 0;
    memcpy(&v, p, w);
    return v;
}

/* A weight-like chunk: words with a sign, a magnitude over a few binades
 * (w >= 2: the top bits vary slowly), and a next version in which `pct`
 * percent of the elements change, mostly by one step of the bit pattern
 * (optimizer-like: a unit in the last place), small weights more often. */
static void make_chunk(uint8_t *base, uint8_t *next, size_t n, unsigned w, double pct)
{
    unsigned bits = 8 * w;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rnd(), v;
        if (w == 1) {
            v = r & 0xff;
        } else {
            /* exponent-like field in the top byte below the sign */
            uint64_t e = 100 + (r >> 59) * 3 + (i / 97) % 5;
            uint64_t mant = rnd() & ((1ull << (bits - 9)) - 1);
            v = ((r >> 63) << (bits - 1)) | ((e & 0x7f) << (bits - 8)) | mant;
            if (w == 8)
                v = ((r >> 63) << 63) | ((e & 0x7f) << 56) | (mant & ((1ull << 55) - 1));
        }
        memcpy(base + i * w, &v, w);
        uint64_t nv = v;
        double u = (double)(rnd() >> 11) / 9007199254740992.0;
        /* small magnitudes change more often */
        double p = pct / 100.0 * (((v >> (bits - 8)) & 0x7f) % 3 == 0 ? 1.8 : 0.6);
        if (u < p) {
            uint64_t k = rnd() % 8;
            nv = k < 6 ? v + 1 : k < 7 ? v - 1 : v ^ (rnd() | 1);
            if (w < 8)
                nv &= (1ull << bits) - 1;
            if (nv == v)
                nv = v ^ 1;
        }
        memcpy(next + i * w, &nv, w);
    }
}

static unsigned ctx_classes_seen; /* ctx payloads with more than one class */
static unsigned vals_seen, vals_small; /* values on demand; with small histograms */

/* Distinct XOR words (steps 0) or step words (steps 1, ctx.h values mode
 * 1) among the changes from base to next (w <= 2). */
static size_t distinct_words(const uint8_t *base, const uint8_t *next, size_t n, unsigned w,
                             int steps)
{
    static uint8_t seen[65536];
    memset(seen, 0, sizeof(seen));
    size_t d = 0;
    unsigned bits = 8 * w;
    uint64_t mask = (1ull << bits) - 1, top = 1ull << (bits - 1);
    for (size_t i = 0; i < n; i++) {
        uint64_t b = get_word(base + i * w, w), x = get_word(next + i * w, w);
        if (b == x)
            continue;
        uint64_t v = b ^ x;
        if (steps) {
            /* zigzag(key(next) - key(base)), key(v) = v ^ (top bit ? all : top) */
            uint64_t kb = b ^ ((b & top) ? mask : top), kx = x ^ ((x & top) ? mask : top);
            uint64_t dd = (kx - kb) & mask;
            v = ((dd << 1) ^ ((dd & top) ? mask : 0)) & mask;
        }
        if (!seen[v]++)
            d++;
    }
    return d;
}

static void *to_dev(const void *h, size_t bytes)
{
    void *d = NULL;
    cr_assert_eq(dc_kern_cuda_malloc(&d, bytes ? bytes : 1), DC_OK);
    cr_assert_eq(dc_kern_cuda_h2d(d, h, bytes), DC_OK);
    return d;
}

/* One chunk through the CPU encoder and the device sender; returns 1 when
 * the device sender encoded it, 0 when it handed it back (dense).
 * pcie_out (may be NULL): the H2D and D2H bytes it moved. */
static int chunk_pair(dc_codec_t *cpu, dc_codec_t *dcod, dc_devsend_t *ds, const uint8_t *base,
                      const uint8_t *next, size_t n, unsigned w, double pct, int host_base,
                      uint64_t *pcie_out, size_t *payload_out);

static int one_chunk(dc_codec_t *cpu, dc_codec_t *dcod, dc_devsend_t *ds, size_t n, unsigned w,
                     double pct, int host_base, uint64_t *pcie_out, size_t *payload_out)
{
    uint8_t *base = malloc(n * w), *next = malloc(n * w);
    cr_assert(base && next);
    make_chunk(base, next, n, w, pct);
    int ok = chunk_pair(cpu, dcod, ds, base, next, n, w, pct, host_base, pcie_out, payload_out);
    free(base);
    free(next);
    return ok;
}

/* One chunk (base -> next) through the CPU encoder and the device sender. */
static int chunk_pair(dc_codec_t *cpu, dc_codec_t *dcod, dc_devsend_t *ds, const uint8_t *base,
                      const uint8_t *next, size_t n, unsigned w, double pct, int host_base,
                      uint64_t *pcie_out, size_t *payload_out)
{
    size_t bytes = n * w, cap = dc_codec_payload_bound(bytes);
    uint8_t *p1 = malloc(cap), *p2 = malloc(cap);
    cr_assert(p1 && p2);
    size_t l1 = 0, l2 = 0;
    uint16_t e1 = 0, e2 = 0;
    dc_digest_t g1, g2;
    cr_assert_eq(dc_codec_encode_digest(cpu, base, next, n, w, p1, cap, &l1, &e1, NULL, NULL,
                                        &g1),
                 DC_OK, "%s", dc_last_error());
    void *db = to_dev(base, bytes), *dn = to_dev(next, bytes);
    uint64_t h0, d0, h1, d1, u0, w0, up, down;
    pcie_now(&u0, &w0);
    dc_devsend_pcie(ds, &h0, &d0);
    uint64_t dflt = g_real ? 0 : dc_emu_default_stream_ops();
    dc_status_t st = dc_devsend_encode(ds, dcod, host_base ? NULL : db, host_base ? base : NULL,
                                       dn, n, w, p2, cap, &l2, &e2, &g2);
    /* all of it on the sender's own stream (the emulated runtime aborts
     * on a stream never created): none on the default stream, which would
     * serialize it with every other encoder thread's */
    cr_assert(g_real || dc_emu_default_stream_ops() == dflt,
                 "the device sender queued work on the default stream (%llu times)",
                 (unsigned long long)(dc_emu_default_stream_ops() - dflt));
    pcie_now(&up, &down);
    up -= u0;
    down -= w0;
    dc_devsend_pcie(ds, &h1, &d1);
    unsigned kind = dc_enc_kind(e1);
    int dense = kind == DC_ENC_XOR_DENSE || kind == DC_ENC_PUT_DENSE;
    int ok = st == DC_OK;
    dc_chunk_stats_t cs;
    cr_assert_eq(dc_codec_inspect(cpu, e1, p1, l1, n, w, &cs), DC_OK);
    size_t lists = dense ? SIZE_MAX
                         : dc_devsend_list_bytes(cs.changed, w,
                                                 dc_codec_model(cpu) == DC_CODEC_MODEL_CTX);
    /* every byte that crossed is the device sender's own accounting */
    if (g_real)
        cr_assert_leq(down, d1 - d0, "D2H %llu, the sender counted %llu",
                      (unsigned long long)down, (unsigned long long)(d1 - d0));
    else
        cr_assert_eq(down, d1 - d0, "emulated D2H %llu, the sender counted %llu",
                     (unsigned long long)down, (unsigned long long)(d1 - d0));
    if (dense || lists >= bytes) {
        cr_assert_eq(st, DC_ERR_UNSUPPORTED,
                     "n %zu w %u %.0f%%: the CPU chose %s, the device sender said %d (%s)", n, w,
                     pct, dc_enc_kind_name(kind), st, dc_last_error());
        cr_assert(strstr(dc_last_error(), dense ? "dense" : "not smaller than"), "%s",
                  dc_last_error());
    } else {
        cr_assert_eq(e2, e1, "n %zu w %u %.0f%%: encoding 0x%04x, CPU 0x%04x", n, w, pct, e2, e1);
        cr_assert_eq(l2, l1, "n %zu w %u %.0f%% %s: payload %zu bytes, CPU %zu", n, w, pct,
                     dc_enc_kind_name(kind), l2, l1);
        cr_assert(memcmp(p1, p2, l1) == 0, "n %zu w %u %.0f%%: payloads differ", n, w, pct);
        cr_assert(g1.lo == g2.lo && g1.hi == g2.hi, "target digest differs");
        int classes = kind == DC_ENC_CTX && (p2[0] & 7) > 0;
        if (classes)
            ctx_classes_seen++;
        /* what crossed: the baseline stream (host baseline) and lists,
         * never the next chunk: the XOR and base words (2w B a change);
         * with the ctx model each class's Golomb positions stream of its
         * ranks (of the positions with one class), at most 3 B a change
         * here (n < 2^21: a gap's code is under 24 bits with the m the
         * encoder picks), and the positions themselves only for a host
         * baseline to patch, as varint gaps (kernels/listpack.h: under
         * 3 B a change here; decoded from the stream with one class);
         * the order0 model's positions as varint gaps */
        int ctxk = kind == DC_ENC_CTX;
        int pos_read = !ctxk || (host_base && classes);
        size_t c = cs.changed;
        size_t expect = c * (2 * (size_t)w + (ctxk ? 3 : 0) + (pos_read ? 3 : 0));
        int vals = kind == DC_ENC_CTX && w <= 2 && c > 0;
        if (vals) {
            /* values on demand: the words of the chosen mode (and of mode
             * 2 when the coder tried it: chosen here, or not, a bound),
             * the XOR words for a host baseline's patch, each word list's
             * histogram (a varint count a distinct word) or, where that is
             * not smaller, its words */
            unsigned mode = (p2[0] >> 3) & 3;
            size_t hx = distinct_words(base, next, n, w, 0), hs = distinct_words(base, next, n,
                                                                                   w, 1);
            /* a count of at most c: vb varint bytes */
            size_t vb = c <= 128 ? 1 : c <= 16384 ? 2 : 3;
            size_t hbytes = (hx * vb < c * w ? hx * vb : c * w) +
                            (hs * vb < c * w ? hs * vb : c * w);
            /* each mode fetched (the first, and 2 when tried): its words,
             * or its rANS stream made on the device (kept at most a
             * quarter of the words; a stream the coder drops costs that
             * quarter on top of the words) after its symbols (a varint of
             * at most 3 B each; mode 2's histogram too) and the lengths */
            size_t hm = hx > hs ? hx : hs;
            size_t per_mode = c * (size_t)w * 5 / 4 + 3 * hm + 3 * 8;
            size_t mode2 = c * (size_t)w * 5 / 4 + 3 * c + c * vb + 4 * 8;
            expect = per_mode + (mode == 2 ? mode2 : 0) +
                     c * ((size_t)w * (host_base ? 1 : 0) + (ctxk ? 3 : 0) + (pos_read ? 3 : 0)) +
                     hbytes + (c < 1024 ? c : 1024 + 16) /* the buckets or their histogram */ +
                     2 * 8 /* the symbol counts */;
            vals_seen++;
            if (hbytes < c * w / 2)
                vals_small++;
        }
        cr_assert_lt(n, (size_t)1 << 21);
        if (!vals)
            cr_assert_leq(expect, lists);
        /* up: the baseline stream, and the rANS tables (4 B a symbol of
         * each mode the device coded) */
        cr_assert_geq(up, host_base ? bytes : 0, "H2D %llu", (unsigned long long)up);
        cr_assert_leq(up - (host_base ? bytes : 0), 4 * (2 * (size_t)c + 2),
                      "H2D %llu", (unsigned long long)up);
        cr_assert_eq(h1 - h0, up);
        /* + the sample histogram, the digest, the count, the populations,
         * each packing's class counts and length, the packed words'
         * lengths, the streams' class counts, last ranks, bits and m */
        cr_assert_leq(down, expect + 1024 + 2 * 16 + 16 + 8 + 8 * 8 + 2 * (8 * 8 + 16) + 5 * 16 +
                                8 * (8 + 4 + 8 + 5),
                      "D2H %llu of a %zu-byte chunk, %zu changes of %u bytes%s%s",
                      (unsigned long long)down, bytes, cs.changed, w,
                      classes ? ", ranks" : "", pos_read ? ", positions" : "");
        const uint32_t *pos;
        const uint8_t *xv;
        size_t cnt;
        dc_devsend_lists(ds, &pos, &xv, &cnt);
        if (ctxk && !host_base) {
            cr_assert(pos == NULL || cnt == 0, "the positions came back unasked");
        } else if (host_base || xv != NULL) {
            cr_assert(pos != NULL, "no positions though %s", host_base ? "asked" : "order0");
            cr_assert(xv != NULL, "no XOR words though asked");
            /* the lists turn the base into next (a host baseline's commit) */
            for (size_t k = 0; k < cnt; k++) {
                uint64_t b = get_word(base + (size_t)pos[k] * w, w) ^ get_word(xv + k * w, w);
                cr_assert_eq(b, get_word(next + (size_t)pos[k] * w, w));
            }
        }
    }
    if (pcie_out) {
        pcie_out[0] = up;
        pcie_out[1] = down;
    }
    if (payload_out)
        *payload_out = l1;
    dc_kern_cuda_free(db);
    dc_kern_cuda_free(dn);
    free(p1);
    free(p2);
    return ok;
}

static void run_model(unsigned model, int host_base)
{
    static const unsigned ws[] = {1, 2, 4, 8};
    /* the host baseline differs in where the base comes from and in the
     * XOR words its patch reads: three widths (the emulated kernels are
     * slow) */
    size_t w0 = host_base ? 1 : 0, w1 = 4;
    static const double pcts[] = {0, 1, 10, 30};
    static const size_t ns[] = {1000, 20000, 70000};
    size_t maxb = 70000 * 8;
    dc_codec_t *cpu, *dcod;
    dc_devsend_t *ds;
    cr_assert_eq(dc_codec_create(maxb, &cpu), DC_OK);
    cr_assert_eq(dc_codec_create(maxb, &dcod), DC_OK);
    dc_codec_set_model(cpu, model);
    dc_codec_set_model(dcod, model);
    size_t streams = g_real ? 0 : dc_emu_live_streams();
    cr_assert_eq(dc_devsend_create(maxb, host_base, &ds), DC_OK, "%s", dc_last_error());
    cr_assert(g_real || dc_emu_live_streams() == streams + 1,
              "a device sender has a stream of its own");
    /* as the engine asks: a host baseline is patched with the positions */
    dc_devsend_want_lists(ds, host_base);
    unsigned encoded = 0, handed_back = 0;
    ctx_classes_seen = 0;
    vals_seen = vals_small = 0;
    for (size_t wi = w0; wi < w1; wi++)
        for (size_t pi = 0; pi < 4; pi++) {
            /* every size for 1%, one size per width otherwise (the
             * emulated kernels are slow) */
            for (size_t ni = 0; ni < 3; ni++) {
                if (pcts[pi] != 1 && ni != (wi + pi) % 3)
                    continue;
                if (one_chunk(cpu, dcod, ds, ns[ni], ws[wi], pcts[pi], host_base, NULL, NULL))
                    encoded++;
                else
                    handed_back++;
            }
        }
    if (model == DC_CODEC_MODEL_CTX) {
        cr_assert_gt(ctx_classes_seen, 0, "no ctx chunk had more than one class (ranks unused)");
        cr_assert_gt(vals_small, 0, "no chunk's values went as small histograms (%u on demand)",
                     vals_seen);
    }
    cr_assert_gt(encoded, host_base ? 5 : 10);
    cr_assert_gt(handed_back, 0, "no 30%% chunk was handed back for staging");
    dc_devsend_free(ds);
    cr_assert(g_real || dc_emu_live_streams() == streams,
              "the device sender's stream outlived it");
    dc_codec_free(cpu);
    dc_codec_free(dcod);
}

Test(emu_sender, ctx_payloads_identical_device_baseline, .timeout = 280)
{
    run_model(DC_CODEC_MODEL_CTX, 0);
}

Test(emu_sender, order0_payloads_identical_device_baseline, .timeout = 280)
{
    run_model(DC_CODEC_MODEL_ORDER0, 0);
}

Test(emu_sender, ctx_payloads_identical_host_baseline_stream, .timeout = 280)
{
    run_model(DC_CODEC_MODEL_CTX, 1);
}

/* The kernels alone against their CPU references. */
Test(emu_sender, sample_histogram_and_ranks_match_the_cpu, .timeout = 280)
{
    static const size_t ns[] = {1, 65, 1000, 16400, 65600};
    for (unsigned wi = 0; wi < 4; wi++) {
        unsigned w = 1u << wi;
        for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
            size_t n = ns[ni], bytes = n * w;
            if (n > 65536 && w > 2)
                continue; /* the 4096-stride sample once per narrow width (emulation is slow) */
            uint8_t *base = malloc(bytes), *next = malloc(bytes);
            make_chunk(base, next, n, w, 5);
            void *db = to_dev(base, bytes);
            /* histogram of the sampled buckets, as ctx.c counts them */
            uint32_t hist[256], ref[256] = {0};
            size_t hx = 0;
            cr_assert_eq(dc_kern_cuda_ctx_sample(db, n, w, hist, &hx, NULL), DC_OK, "%s",
                         dc_last_error());
            size_t stride = n >= 65536 ? 4096 : n >= 16384 ? 1024 : 64, sampled = 0;
            unsigned sh = w == 1 ? 0 : w == 2 ? 7 : w == 4 ? 23 : 55;
            for (size_t i0 = 0; i0 < n; i0 += stride)
                for (size_t i = i0; i < n && i < i0 + 64; i++) {
                    uint64_t m = get_word(base + i * w, w) & ((~0ull >> (64 - 8 * w)) >> 1);
                    ref[m >> sh]++;
                    sampled++;
                }
            cr_assert_eq(sampled, dc_ctx_sampled(n));
            cr_assert(memcmp(hist, ref, sizeof(ref)) == 0, "w %u n %zu: histograms differ", w,
                      n);
            /* packed: these buckets fill a few dozen of the 256 counters */
            cr_assert(hx > 16 && hx < 512, "w %u n %zu: %zu histogram bytes crossed", w, n, hx);
            /* ranks: every 3rd element changed, 1..7 thresholds */
            size_t count = (n + 2) / 3;
            uint32_t *pos = malloc(count * 4 + 4), *rnk = malloc(count * 4 + 4),
                     *rref = malloc(count * 4 + 4);
            uint8_t *cls = malloc(count + 1), *cref = malloc(count + 1);
            for (size_t k = 0; k < count; k++)
                pos[k] = (uint32_t)(k * 3);
            void *dp = to_dev(pos, count * 4), *dc = NULL, *dr = NULL;
            cr_assert_eq(dc_kern_cuda_malloc(&dc, count + 1), DC_OK);
            cr_assert_eq(dc_kern_cuda_malloc(&dr, count * 4 + 4), DC_OK);
            for (unsigned nt = 1; nt <= 7; nt += 6) {
                uint64_t thr[7], pop[8], pref[8];
                uint64_t ge[DC_CTX_SLAB * 7];
                for (unsigned j = 0; j < nt; j++)
                    thr[j] = (uint64_t)(w == 1 ? 1 + j * 15 : 90 + j * 7) << sh;
                cr_assert_eq(dc_kern_cuda_ctx_rank(db, n, w, thr, nt, dp, count, dc, dr, pop,
                                                   NULL),
                             DC_OK, "%s", dc_last_error());
                cr_assert_eq(dc_kern_cuda_d2h(cls, dc, count), DC_OK);
                cr_assert_eq(dc_kern_cuda_d2h(rnk, dr, count * 4), DC_OK);
                dc_kern_cur()->ctx->rank(base, n, w, thr, nt, pos, count, cref, rref, pref, ge);
                cr_assert(memcmp(pop, pref, (nt + 1) * 8) == 0, "w %u n %zu nt %u: populations",
                          w, n, nt);
                cr_assert(memcmp(cls, cref, count) == 0, "w %u n %zu nt %u: classes", w, n, nt);
                cr_assert(memcmp(rnk, rref, count * 4) == 0, "w %u n %zu nt %u: ranks", w, n,
                          nt);
            }
            dc_kern_cuda_free(dp);
            dc_kern_cuda_free(dc);
            dc_kern_cuda_free(dr);
            dc_kern_cuda_free(db);
            free(pos);
            free(rnk);
            free(rref);
            free(cls);
            free(cref);
            free(base);
            free(next);
        }
    }
}

/* The rank lists packed on the device (dc_kern_cuda_pack_ranks) against
 * the CPU reference (kernels/listpack.h): 1 to 8 classes and one list of
 * positions (no classes), counts across the 2048-change tiles, gaps of
 * every varint length; byte-identical, and the counts per class. */
Test(emu_sender, packed_rank_lists_match_the_cpu, .timeout = 280)
{
    static const size_t counts[] = {0, 1, 2047, 2048, 2049, 9000};
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
        for (unsigned K = 0; K <= 8; K += (K < 2 ? 1 : 3)) {
            /* K 0: positions, one list without classes */
            size_t count = counts[ci];
            unsigned nk = K ? K : 1;
            uint8_t *cls = malloc(count + 1), *ref = malloc(dc_listpack_bound(count)),
                    *got = malloc(dc_listpack_bound(count));
            uint32_t *rnk = malloc(4 * count + 4), next[8] = {0};
            cr_assert(cls && ref && got && rnk);
            for (size_t k = 0; k < count; k++) {
                unsigned c = (unsigned)(rnd() % nk);
                cls[k] = (uint8_t)c;
                /* mostly small gaps, some of every varint length */
                uint64_t r = rnd();
                /* odd sizes: dense changes (gaps under 8: nibbles win) */
                uint32_t gap = (uint32_t)(r % 64 == 0 ? (rnd() % (1u << (7 * (1 + r % 4))))
                                          : ci % 2 ? r % 6 : r % 90);
                next[c] += gap;
                rnk[k] = next[c]++;
            }
            size_t lref = 0, lnib = 0, lgot = 0, cap = dc_listpack_bound(count);
            uint64_t cref[8], cgot[8];
            const uint8_t *hc = K ? cls : NULL;
            int nib = -1, want_nib = 0;
            /* the CPU both ways; the device writes the smaller (bytes on a tie) */
            cr_assert_eq(dc_listpack(hc, rnk, count, nk, 1, ref, cap, &lnib, cref), DC_OK, "%s",
                         dc_last_error());
            cr_assert_eq(dc_listpack(hc, rnk, count, nk, 0, ref, cap, &lref, cref), DC_OK, "%s",
                         dc_last_error());
            if (count > 0 && lnib < lref) {
                want_nib = 1;
                cr_assert_eq(dc_listpack(hc, rnk, count, nk, 1, ref, cap, &lref, cref), DC_OK);
            }
            void *dc = to_dev(cls, count + 1), *dr = to_dev(rnk, 4 * count + 4), *dout = NULL;
            cr_assert_eq(dc_kern_cuda_malloc(&dout, cap), DC_OK);
            cr_assert_eq(dc_kern_cuda_pack_ranks(K ? dc : NULL, dr, count, nk, dout, &lgot, &nib,
                                                 cgot, NULL),
                         DC_OK, "%s", dc_last_error());
            cr_assert_eq(nib, want_nib, "count %zu K %u: nibbles %d", count, K, nib);
            cr_assert_eq(lgot, lref, "count %zu K %u: %zu packed bytes, CPU %zu", count, K, lgot,
                         lref);
            cr_assert(memcmp(cgot, cref, nk * 8) == 0, "count %zu K %u: class counts", count, K);
            cr_assert_eq(dc_kern_cuda_d2h(got, dout, lgot), DC_OK);
            cr_assert(memcmp(got, ref, lref) == 0, "count %zu K %u: packed bytes differ", count,
                      K);
            dc_kern_cuda_free(dc);
            dc_kern_cuda_free(dr);
            dc_kern_cuda_free(dout);
            free(cls);
            free(ref);
            free(got);
            free(rnk);
        }
    /* a class list without its classes is refused */
    uint64_t cc[8];
    size_t l;
    int nb;
    cr_assert_eq(dc_kern_cuda_pack_ranks(NULL, NULL, 0, 3, NULL, &l, &nb, cc, NULL),
                 DC_ERR_INVALID);
}

/* The Golomb positions streams made on the device (dc_kern_cuda_golomb_
 * ranks) against the CPU's encoder (entropy.h dc_ent_pos_encode of each
 * class's ranks): 1 to 8 classes, empty classes, one list of positions (no
 * classes), counts across the 2048-change tiles, dense classes (m 1),
 * sparse ones, and a gap far above the class's mean (a code of thousands
 * of zeros, past 32-bit words); byte-identical, class by class, with the
 * counts; an output too small is DC_ERR_BUSY. */
Test(emu_sender, golomb_streams_match_the_cpu, .timeout = 280)
{
    static const size_t counts[] = {1, 2, 2047, 2049, 9000};
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
        for (unsigned K = 0; K <= 8; K += (K < 2 ? 1 : 3)) {
            size_t count = counts[ci];
            unsigned nk = K ? K : 1;
            uint8_t *cls = malloc(count + 1);
            uint32_t *rnk = malloc(4 * count + 4), *grp = malloc(4 * count + 4), next[8] = {0};
            cr_assert(cls && rnk && grp);
            for (size_t k = 0; k < count; k++) {
                /* class nk - 1 stays empty from 3 classes on */
                unsigned c = (unsigned)(rnd() % (nk > 2 ? nk - 1 : nk));
                cls[k] = (uint8_t)c;
                uint64_t r = rnd();
                /* class 0 dense (gaps 0 and 1), the others sparser; now
                 * and then a far gap */
                uint32_t gap = (uint32_t)(c == 0 ? r % 2 : r % (40u << c));
                if (r % 997 == 0)
                    gap = (uint32_t)(rnd() % (1u << 24));
                next[c] += gap;
                rnk[k] = next[c]++;
            }
            size_t cap = 16 * 8 + count * 34 / 8 + ((size_t)1 << 23), lref[8] = {0}, lgot[8];
            uint8_t *ref = malloc(cap), *got = malloc(cap);
            uint64_t cgot[8], cref[8] = {0};
            cr_assert(ref && got);
            /* the CPU: each class's ranks in order, then its stream */
            size_t off = 0, g = 0;
            for (unsigned c = 0; c < nk; c++) {
                size_t m = 0;
                for (size_t k = 0; k < count; k++)
                    if (!K || cls[k] == c)
                        grp[g + m++] = rnk[k];
                cref[c] = m;
                if (m) {
                    cr_assert_eq(dc_ent_pos_encode(grp + g, m, (uint64_t)grp[g + m - 1] + 1,
                                                   ref + off, cap - off, &lref[c]),
                                 DC_OK, "%s", dc_last_error());
                }
                off += lref[c];
                g += m;
            }
            void *dc = to_dev(cls, count + 1), *dr = to_dev(rnk, 4 * count + 4), *dout = NULL;
            size_t hx = 0;
            cr_assert_eq(dc_kern_cuda_malloc(&dout, cap), DC_OK);
            cr_assert_eq(dc_kern_cuda_golomb_ranks(K ? dc : NULL, dr, count, nk, dout, cap, lgot,
                                                   cgot, &hx, NULL),
                         DC_OK, "count %zu K %u: %s", count, K, dc_last_error());
            cr_assert(memcmp(cgot, cref, nk * 8) == 0, "count %zu K %u: class counts", count, K);
            cr_assert(memcmp(lgot, lref, nk * sizeof(size_t)) == 0,
                      "count %zu K %u: stream lengths (class 0: %zu, CPU %zu)", count, K, lgot[0],
                      lref[0]);
            cr_assert_eq(dc_kern_cuda_d2h(got, dout, off), DC_OK);
            for (unsigned c = 0, o = 0; c < nk; o += (unsigned)lref[c], c++)
                cr_assert(memcmp(got + o, ref + o, lref[c]) == 0,
                          "count %zu K %u: class %u's stream differs", count, K, c);
            cr_assert_leq(hx, nk * (8 + 4 + 8), "count %zu K %u: %zu bytes read back", count, K,
                          hx);
            /* an output one byte short */
            if (off > 0)
                cr_assert_eq(dc_kern_cuda_golomb_ranks(K ? dc : NULL, dr, count, nk, dout,
                                                       off - 1, lgot, cgot, &hx, NULL),
                             DC_ERR_BUSY);
            dc_kern_cuda_free(dc);
            dc_kern_cuda_free(dr);
            dc_kern_cuda_free(dout);
            free(cls);
            free(ref);
            free(got);
            free(rnk);
            free(grp);
        }
    uint64_t cc[8];
    size_t l[8], hx;
    cr_assert_eq(dc_kern_cuda_golomb_ranks(NULL, NULL, 0, 3, NULL, 0, l, cc, &hx, NULL),
                 DC_ERR_INVALID);
}

/* The device's rANS values (dc_kern_cuda_word_syms, dc_kern_cuda_rans_encode
 * after the host's table, entropy.h dc_ent_rans_table) against the CPU's
 * rANS stream of the same words (dc_ent_val_force = rANS): 1- and 2-byte
 * words, skewed and flat, every interleave (1, 2, 4 ways by count, 32 from
 * 4096 words; each forced too), one symbol, and the histogram's entropy
 * bit-identical to the CPU's figure; a histogram that is not one is
 * refused. */
Test(emu_sender, rans_values_match_the_cpu, .timeout = 280)
{
    static const size_t counts[] = {1, 15, 16, 63, 64, 4095, 4096, 20000};
    static const unsigned ways[] = {0, 1, 2, 4, 32};
    unsigned rans_seen = 0;
    dc_ent_scratch_t *ent;
    cr_assert_eq(dc_ent_scratch_create(20000 * 2, &ent), DC_OK);
    for (unsigned w = 1; w <= 2; w++)
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
            for (unsigned wi = 0; wi < sizeof(ways) / sizeof(ways[0]); wi++)
                for (int flat = 0; flat < 2; flat++) {
                    size_t count = counts[ci];
                    if (wi > 0 && count != 64 && count != 4096)
                        continue; /* forced interleaves: two sizes */
                    size_t gcap = dc_ent_val_bound(count, w) + 32 + 6 * count;
                    uint8_t *v = malloc(count * w), *cpu = malloc(gcap), *got = malloc(gcap);
                    cr_assert(v && cpu && got);
                    for (size_t k = 0; k < count; k++) {
                        uint64_t r = rnd();
                        /* steps: mostly small; flat: a few hundred symbols */
                        unsigned x = flat ? (unsigned)(r % 300) : (unsigned)(r % 16 == 0
                                                                              ? r % 4000
                                                                              : r % 6);
                        if (count == 15)
                            x = 7; /* one symbol */
                        if (w == 1)
                            x &= 0xff;
                        memcpy(v + k * w, &x, w);
                    }
                    dc_ent_rans_ways = ways[wi];
                    dc_ent_val_force = DC_ENT_RANS;
                    size_t lcpu = 0;
                    unsigned m = 0;
                    double hcpu = 0, hgot = 0;
                    /* (forced: the rANS stream whether or not it is the smallest) */
                    dc_status_t cs = dc_ent_val_encode_h(ent, v, count, w, 0, cpu, gcap, &lcpu,
                                                         &m, NULL);
                    dc_ent_val_force = -1;
                    hcpu = dc_ent_words_entropy_bits(ent, v, count, w);
                    /* the device: the histogram's counts and symbols */
                    void *dv = to_dev(v, count * w), *dout = NULL;
                    size_t cap = count * 5 + 8, lc = 0, ls = 0, nsym = 0, nsym2 = 0;
                    cr_assert_eq(dc_kern_cuda_malloc(&dout, cap + 4 * 32), DC_OK);
                    uint8_t *pk = malloc(cap);
                    uint32_t *cnt = malloc(4 * count), *syms32 = malloc(4 * count);
                    uint16_t *sym = malloc(2 * count);
                    cr_assert(pk && cnt && syms32 && sym);
                    cr_assert_eq(dc_kern_cuda_word_hist(dv, count, w, dout, &lc, NULL), DC_OK);
                    cr_assert_eq(dc_kern_cuda_d2h(pk, dout, lc), DC_OK);
                    cr_assert_eq(dc_listunpack_counts(pk, lc, count, cnt, &nsym), DC_OK);
                    cr_assert_eq(dc_kern_cuda_word_syms(dv, count, w, dout, &ls, NULL), DC_OK);
                    cr_assert_eq(dc_kern_cuda_d2h(pk, dout, ls), DC_OK);
                    cr_assert_eq(dc_listunpack_words(pk, ls, nsym, 4, 0, syms32), DC_OK);
                    (void)nsym2;
                    for (size_t k = 0; k < nsym; k++)
                        sym[k] = (uint16_t)syms32[k];
                    size_t h = 0, ld = 0, h2d = 0;
                    unsigned S = 0, wy = 0;
                    uint32_t *qs = malloc(4 * nsym);
                    cr_assert(qs);
                    dc_ent_rans_ways = ways[wi];
                    dc_status_t ts = dc_ent_rans_table(ent, sym, cnt, nsym, count, w, got, gcap,
                                                       &h, &S, &wy, qs, &hgot);
                    cr_assert_eq(cs, DC_OK, "%s", dc_last_error());
                    if (m != DC_ENT_RANS) {
                        /* the CPU did not code rANS: nor does the table */
                        cr_assert_eq(ts, DC_ERR_BUSY, "w %u count %zu: table %d", w, count, ts);
                    } else {
                        cr_assert_eq(ts, DC_OK, "w %u count %zu: table %d", w, count, ts);
                        rans_seen++;
                        cr_assert(memcmp(&hgot, &hcpu, sizeof(hcpu)) == 0,
                                  "w %u count %zu: entropy %.17g, CPU %.17g", w, count, hgot,
                                  hcpu);
                        cr_assert_eq(dc_kern_cuda_rans_encode(dv, count, w, qs, nsym, S, wy, dout,
                                                              cap + 4 * 32, &ld, &h2d, NULL),
                                     DC_OK, "%s", dc_last_error());
                        cr_assert_eq(h2d, 4 * nsym);
                        cr_assert_eq(h + ld, lcpu, "w %u count %zu ways %u flat %d: %zu + %zu "
                                     "bytes, CPU %zu", w, count, wy, flat, h, ld, lcpu);
                        cr_assert_eq(dc_kern_cuda_d2h(got + h, dout, ld), DC_OK);
                        cr_assert(memcmp(got, cpu, lcpu) == 0,
                                  "w %u count %zu ways %u flat %d: streams differ", w, count, wy,
                                  flat);
                        if (nsym > 1) {
                            /* a table that lacks a symbol of the words (its
                             * frequency given to the next: a valid table) */
                            uint32_t q1 = qs[1];
                            qs[1] += ((qs[0] >> 16) + 1) << 16;
                            cr_assert_eq(dc_kern_cuda_rans_encode(dv, count, w, qs + 1, nsym - 1,
                                                                  S, wy, dout, cap + 4 * 32, &ld,
                                                                  &h2d, NULL),
                                         DC_ERR_INVALID);
                            cr_assert(strstr(dc_last_error(), "does not have") != NULL, "%s",
                                      dc_last_error());
                            qs[1] = q1;
                            /* tables that are not one: refused before the device
                             * (frequencies past 2^S; the last symbol not above
                             * the others; past a byte, or for 2-byte words a
                             * repeat) */
                            for (int b = 0; b < 3; b++) {
                                uint32_t *e = b == 0 ? &qs[0] : &qs[nsym - 1], keep = *e;
                                if (b == 0)
                                    *e += 1u << 16;
                                else if (b == 1)
                                    *e = (keep & ~0xffffu) | (qs[0] & 0xffffu);
                                else
                                    *e = (keep & ~0xffffu) |
                                         (w == 1 ? 0x100u : qs[nsym - 2] & 0xffffu);
                                cr_assert_eq(dc_kern_cuda_rans_encode(dv, count, w, qs, nsym, S,
                                                                      wy, dout, cap + 4 * 32,
                                                                      &ld, &h2d, NULL),
                                             DC_ERR_INVALID, "bad table %d", b);
                                cr_assert(strstr(dc_last_error(), b == 0 ? "sum to"
                                                                         : "table entry"),
                                          "%s", dc_last_error());
                                *e = keep;
                            }
                        }
                    }
                    dc_ent_rans_ways = 0;
                    /* a histogram that is not one */
                    if (nsym > 1) {
                        uint16_t s0 = sym[1];
                        sym[1] = sym[0];
                        cr_assert_eq(dc_ent_rans_table(ent, sym, cnt, nsym, count, w, got,
                                                       dc_ent_val_bound(count, w), &h, &S, &wy,
                                                       qs, &hgot),
                                     DC_ERR_INVALID);
                        sym[1] = s0;
                    }
                    cr_assert_eq(dc_ent_rans_table(ent, sym, cnt, nsym, count + 1, w, got,
                                                   dc_ent_val_bound(count, w), &h, &S, &wy, qs,
                                                   &hgot),
                                 DC_ERR_INVALID);
                    dc_kern_cuda_free(dv);
                    dc_kern_cuda_free(dout);
                    free(v);
                    free(cpu);
                    free(got);
                    free(pk);
                    free(cnt);
                    free(syms32);
                    free(sym);
                    free(qs);
                }
    cr_assert_gt(rans_seen, 30, "only %u streams coded with rANS", rans_seen);
    dc_ent_scratch_free(ent);
}

/* The values-on-demand kernels against the CPU: step and new words and
 * the bucket histogram (dc_kern_cuda_ctx_values), and each word list's
 * histogram in first-appearance order (dc_kern_cuda_word_hist) whose
 * entropy is bit-identical to dc_ent_words_entropy_bits of the words. */
Test(emu_sender, values_kernels_match_the_cpu, .timeout = 280)
{
    static const size_t counts[] = {1, 7, 2048, 2049, 20000};
    dc_ent_scratch_t *ent;
    cr_assert_eq(dc_ent_scratch_create(20000 * 8, &ent), DC_OK);
    for (unsigned w = 1; w <= 2; w++)
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
            for (int skew = 0; skew < 2; skew++) {
                size_t count = counts[ci], bytes = count * w;
                uint8_t *bw = malloc(bytes), *xv = malloc(bytes), *st = malloc(bytes),
                        *nw = malloc(bytes), *ref = malloc(bytes);
                uint32_t *cnt = malloc(count * 4), bh[256], bref[256] = {0};
                cr_assert(bw && xv && st && nw && ref && cnt);
                for (size_t k = 0; k < count; k++) {
                    uint64_t b = rnd(), x = skew ? (rnd() % 5 == 0 ? rnd() : 1u << (rnd() % 3))
                                                 : rnd();
                    if ((x & ((1ull << (8 * w)) - 1)) == 0)
                        x = 1;
                    memcpy(bw + k * w, &b, w);
                    memcpy(xv + k * w, &x, w);
                    uint64_t m = get_word(bw + k * w, w) & ((1ull << (8 * w - 1)) - 1);
                    bref[w == 1 ? m : m >> 7]++;
                }
                void *db = to_dev(bw, bytes), *dx = to_dev(xv, bytes), *ds = NULL, *dn = NULL,
                     *dcn = NULL, *dk = NULL;
                uint8_t *bk = malloc(count);
                cr_assert(bk);
                cr_assert_eq(dc_kern_cuda_malloc(&dk, count), DC_OK);
                cr_assert_eq(dc_kern_cuda_malloc(&ds, bytes), DC_OK);
                cr_assert_eq(dc_kern_cuda_malloc(&dn, bytes), DC_OK);
                cr_assert_eq(dc_kern_cuda_malloc(&dcn, 5 * count), DC_OK);
                uint8_t *pk = malloc(5 * count);
                cr_assert(pk);
                size_t hx = 0;
                cr_assert_eq(dc_kern_cuda_ctx_values(db, dx, count, w, ds, dn, dk, bh, &hx, NULL),
                             DC_OK, "%s", dc_last_error());
                cr_assert(hx > 0 && hx <= 1024 + 16, "w %u: %zu histogram bytes", w, hx);
                cr_assert(memcmp(bh, bref, sizeof(bref)) == 0, "w %u count %zu: buckets", w,
                          count);
                cr_assert_eq(dc_kern_cuda_d2h(bk, dk, count), DC_OK);
                for (size_t k = 0; k < count; k++) {
                    uint64_t m = get_word(bw + k * w, w) & ((1ull << (8 * w - 1)) - 1);
                    cr_assert_eq(bk[k], w == 1 ? m : m >> 7, "w %u: bucket %zu", w, k);
                }
                /* without the histogram: the buckets alone */
                cr_assert_eq(dc_kern_cuda_ctx_values(db, dx, count, w, ds, dn, dk, NULL, &hx,
                                                     NULL),
                             DC_OK, "%s", dc_last_error());
                cr_assert_eq(hx, 0, "no histogram asked, %zu bytes crossed", hx);
                cr_assert_eq(dc_kern_cuda_d2h(st, ds, bytes), DC_OK);
                cr_assert_eq(dc_kern_cuda_d2h(nw, dn, bytes), DC_OK);
                unsigned bits = 8 * w;
                uint64_t mask = (1ull << bits) - 1, top = 1ull << (bits - 1);
                for (size_t k = 0; k < count; k++) {
                    uint64_t b = get_word(bw + k * w, w), x = b ^ get_word(xv + k * w, w);
                    uint64_t kb = b ^ ((b & top) ? mask : top), kx = x ^ ((x & top) ? mask : top);
                    uint64_t dd = (kx - kb) & mask;
                    uint64_t z = ((dd << 1) ^ ((dd & top) ? mask : 0)) & mask;
                    cr_assert_eq(get_word(st + k * w, w), z, "w %u: step word %zu", w, k);
                    cr_assert_eq(get_word(nw + k * w, w), x, "w %u: new word %zu", w, k);
                }
                /* the histograms of both lists, entropy bit for bit */
                const uint8_t *lists[2] = {xv, st};
                void *dl[2] = {dx, ds};
                for (int l = 0; l < 2; l++) {
                    size_t nsym = 0, hlen = 0;
                    cr_assert_eq(dc_kern_cuda_word_hist(dl[l], count, w, dcn, &hlen, NULL), DC_OK,
                                 "%s", dc_last_error());
                    cr_assert(hlen >= 1 && hlen <= 5 * count);
                    cr_assert_eq(dc_kern_cuda_d2h(pk, dcn, hlen), DC_OK);
                    cr_assert_eq(dc_listunpack_counts(pk, hlen, count, cnt, &nsym), DC_OK, "%s",
                                 dc_last_error());
                    double got = dc_ent_counts_entropy_bits(cnt, nsym, count),
                           want = dc_ent_words_entropy_bits(ent, lists[l], count, w);
                    cr_assert(memcmp(&got, &want, sizeof(got)) == 0,
                              "w %u count %zu list %d: entropy %.17g, CPU %.17g", w, count, l,
                              got, want);
                    /* the counts themselves, in first-appearance order */
                    static uint32_t h[65536];
                    static uint16_t order[65536];
                    size_t m = 0;
                    for (size_t k = 0; k < count; k++) {
                        unsigned c = (unsigned)get_word(lists[l] + k * w, w);
                        if (h[c]++ == 0)
                            order[m++] = (uint16_t)c;
                    }
                    cr_assert_eq(nsym, m, "w %u count %zu: %zu symbols, CPU %zu", w, count, nsym,
                                 m);
                    for (size_t j = 0; j < m; j++) {
                        cr_assert_eq(cnt[j], h[order[j]], "w %u count %zu: count %zu", w, count,
                                     j);
                        h[order[j]] = 0;
                    }
                }
                dc_kern_cuda_free(db);
                dc_kern_cuda_free(dx);
                dc_kern_cuda_free(ds);
                dc_kern_cuda_free(dn);
                dc_kern_cuda_free(dcn);
                dc_kern_cuda_free(dk);
                free(bk);
                free(pk);
                free(bw);
                free(xv);
                free(st);
                free(nw);
                free(ref);
                free(cnt);
            }
    dc_ent_scratch_free(ent);
}

/* Words packed as varints on the device (dc_kern_cuda_pack_words) against
 * the CPU reference, w 1, 2, 4, small and large values, counts across the
 * 2048-word tiles; unpacked back to the words. */
Test(emu_sender, packed_words_match_the_cpu, .timeout = 280)
{
    static const size_t counts[] = {0, 1, 2047, 2049, 9000};
    for (unsigned w = 1; w <= 4; w *= 2)
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
            size_t count = counts[ci], bytes = count * w;
            uint8_t *v = malloc(bytes + 1), *ref = malloc(dc_listpack_bound(count)),
                    *got = malloc(dc_listpack_bound(count)), *back = malloc(bytes + 1);
            cr_assert(v && ref && got && back);
            /* mostly small words (nibbles win) or mostly large (bytes) */
            for (size_t k = 0; k < count; k++) {
                uint64_t r = rnd(), x = (r % 4 != 0) == (ci % 2 == 0) ? r % 5 : rnd();
                memcpy(v + k * w, &x, w);
            }
            /* the CPU reference both ways; the device picks the smaller
             * (bytes on a tie) */
            size_t lref = 0, lnib = 0, lgot = 0, cap = dc_listpack_bound(count);
            int nib = -1;
            cr_assert_eq(dc_listpack_words(v, count, w, 1, ref, cap, &lnib), DC_OK, "%s",
                         dc_last_error());
            int want_nib = 0;
            cr_assert_eq(dc_listpack_words(v, count, w, 0, ref, cap, &lref), DC_OK);
            if (count > 0 && lnib < lref) {
                want_nib = 1;
                cr_assert_eq(dc_listpack_words(v, count, w, 1, ref, cap, &lref), DC_OK);
            }
            void *dv = to_dev(v, bytes + 1), *dout = NULL;
            cr_assert_eq(dc_kern_cuda_malloc(&dout, cap), DC_OK);
            cr_assert_eq(dc_kern_cuda_pack_words(dv, count, w, dout, &lgot, &nib, NULL), DC_OK,
                         "%s", dc_last_error());
            cr_assert_eq(nib, want_nib, "w %u count %zu: nibbles %d", w, count, nib);
            cr_assert_eq(lgot, lref, "w %u count %zu: %zu packed bytes, CPU %zu", w, count, lgot,
                         lref);
            cr_assert_eq(dc_kern_cuda_d2h(got, dout, lgot), DC_OK);
            cr_assert(memcmp(got, ref, lref) == 0, "w %u count %zu: packed bytes differ", w,
                      count);
            cr_assert_eq(dc_listunpack_words(got, lgot, count, w, nib, back), DC_OK, "%s",
                         dc_last_error());
            cr_assert(memcmp(back, v, bytes) == 0, "w %u count %zu: words differ", w, count);
            dc_kern_cuda_free(dv);
            dc_kern_cuda_free(dout);
            free(v);
            free(ref);
            free(got);
            free(back);
        }
    size_t l;
    int nb;
    cr_assert_eq(dc_kern_cuda_pack_words(NULL, 0, 8, NULL, &l, &nb, NULL), DC_ERR_INVALID);
}

/* The BF16 tensors of a safetensors pair (DELTACAST_DEVSEND_PAIR=A,B:
 * perf/devsend-bench.sh) as one base and one next buffer, tensors matched
 * by name; *n their elements. */
static void load_pair(const char *spec, uint8_t **base, uint8_t **next, size_t *n)
{
    char a[4096];
    snprintf(a, sizeof(a), "%s", spec);
    char *b = strchr(a, ',');
    cr_assert(b, "DELTACAST_DEVSEND_PAIR=%s: not A,B", spec);
    *b++ = 0;
    dc_st_file_t *fa, *fb;
    cr_assert_eq(dc_st_open(a, DC_ST_READ, &fa), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_st_open(b, DC_ST_READ, &fb), DC_OK, "%s", dc_last_error());
    size_t total = 0;
    for (size_t i = 0; i < dc_st_count(fa); i++) {
        const dc_st_tensor_t *t = dc_st_tensor(fa, i), *u = dc_st_find(fb, t->name);
        if (t->dtype == DC_DTYPE_BF16 && u && u->dtype == DC_DTYPE_BF16 && u->nelems == t->nelems)
            total += t->nelems;
    }
    cr_assert_gt(total, 0, "%s: no BF16 tensor in both files", spec);
    *base = malloc(total * 2);
    *next = malloc(total * 2);
    cr_assert(*base && *next);
    size_t o = 0;
    for (size_t i = 0; i < dc_st_count(fa); i++) {
        const dc_st_tensor_t *t = dc_st_tensor(fa, i), *u = dc_st_find(fb, t->name);
        if (t->dtype == DC_DTYPE_BF16 && u && u->dtype == DC_DTYPE_BF16 && u->nelems == t->nelems) {
            memcpy(*base + o, dc_st_map(fa) + t->begin, t->nelems * 2);
            memcpy(*next + o, dc_st_map(fb) + u->begin, u->nelems * 2);
            o += t->nelems * 2;
        }
    }
    *n = total;
    dc_st_close(fa);
    dc_st_close(fb);
}

/* A device receiver's side of a chunk: the CPU's payload of base -> next
 * (m elements of w bytes) applied on the device (engine/devpath.c, a
 * one-chunk node: emu_pnode.h) to the baseline there, its target digest
 * computed there; the chunk must come out as next.  *h2d and *d2h: what
 * the receiver moved across PCIe (not the test's own upload of the
 * baseline and download of the result); returns the payload's bytes. */
static size_t recv_chunk(dc_codec_t *cpu, const uint8_t *base, const uint8_t *next, size_t m,
                         unsigned w, uint64_t *h2d, uint64_t *d2h)
{
    size_t bytes = m * w, cap = dc_codec_payload_bound(bytes), len = 0;
    uint8_t *pl = malloc(cap);
    uint16_t enc = 0;
    dc_digest_t want, got;
    cr_assert(pl);
    cr_assert_eq(dc_codec_encode_digest(cpu, base, next, m, w, pl, cap, &len, &enc, NULL, NULL,
                                        &want),
                 DC_OK, "%s", dc_last_error());
    pnode_t p;
    pnode_open(&p, m, w);
    cr_assert_eq(dc_kern_cuda_h2d(p.dchunk, base, bytes), DC_OK);
    uint64_t u0, d0, u1, d1;
    pcie_now(&u0, &d0);
    cr_assert_eq(dc_devpath_apply_test(p.n, 0, enc, pl, len, 0), DC_DEV_DONE, "%s",
                 dc_last_error());
    cr_assert_eq(dc_devpath_digest(p.n, 0, &got), DC_DEV_DONE, "%s", dc_last_error());
    pcie_now(&u1, &d1);
    *h2d = u1 - u0;
    *d2h = d1 - d0;
    cr_assert(got.lo == want.lo && got.hi == want.hi, "the device's target digest differs");
    cr_assert_eq(dc_kern_cuda_d2h(p.back, p.dchunk, bytes), DC_OK);
    cr_assert(memcmp(p.back, next, bytes) == 0, "the device receiver's chunk differs");
    pnode_close(&p);
    free(pl);
    return len;
}

/* What crosses PCIe for chunks of the default size (4 MiB of BF16 words,
 * device baseline, the ctx model) against their payload, for the device
 * sender that encodes them and a device receiver that applies them: a
 * synthetic chunk 1% changed, or (DELTACAST_DEVSEND_PAIR=A,B:
 * perf/devsend-bench.sh) every 4 MiB of a real step pair's BF16 tensors;
 * printed, and for the synthetic chunk both bounded at the target,
 * 1.5x (unpacked, the sender's lists were 9 B a change: 5.6x its
 * payload). */
Test(emu_sender, d2h_of_4mib_chunks_against_their_payload, .timeout = 600)
{
    const size_t cn = ((size_t)1 << 21) - 1000; /* chunk_pair's bounds want n < 2^21 */
    const unsigned w = 2;
    const char *pair = getenv("DELTACAST_DEVSEND_PAIR");
    dc_codec_t *cpu, *dcod;
    dc_devsend_t *ds;
    cr_assert_eq(dc_codec_create(cn * w, &cpu), DC_OK);
    cr_assert_eq(dc_codec_create(cn * w, &dcod), DC_OK);
    cr_assert_eq(dc_devsend_create(cn * w, 0, &ds), DC_OK, "%s", dc_last_error());
    uint64_t d2h = 0;
    size_t pay = 0, n = cn, chunks = 0, staged = 0;
    uint8_t *base, *next;
    if (pair && *pair) {
        load_pair(pair, &base, &next, &n);
    } else {
        base = malloc(n * w);
        next = malloc(n * w);
        cr_assert(base && next);
        make_chunk(base, next, n, w, 1.0);
    }
    uint64_t rh2d = 0, rd2h = 0;
    size_t rpay = 0;
    uint64_t h2d = 0;
    for (size_t e = 0; e < n; e += cn) {
        size_t m = n - e < cn ? n - e : cn, p = 0;
        uint64_t d[2] = {0, 0}, rh = 0, rd = 0;
        if (chunk_pair(cpu, dcod, ds, base + e * w, next + e * w, m, w, 1.0, 0, d, &p)) {
            h2d += d[0];
            d2h += d[1];
            pay += p;
        } else {
            staged++;
        }
        rpay += recv_chunk(cpu, base + e * w, next + e * w, m, w, &rh, &rd);
        rh2d += rh;
        rd2h += rd;
        chunks++;
    }
    const char *what = pair && *pair ? pair : "synthetic, 1% changed";
    fprintf(stderr, "emu_sender: %s: %zu chunks of up to %zu bytes (%zu staged): device sender: "
                    "H2D %llu + D2H %llu B for %zu bytes of payload: %.2fx\n",
            what, chunks, cn * w, staged, (unsigned long long)h2d, (unsigned long long)d2h, pay,
            (double)(h2d + d2h) / (double)(pay ? pay : 1));
    fprintf(stderr, "emu_sender: %s: device receiver: H2D %llu + D2H %llu B for %zu bytes of "
                    "payload: %.2fx\n",
            what, (unsigned long long)rh2d, (unsigned long long)rd2h, rpay,
            (double)(rh2d + rd2h) / (double)(rpay ? rpay : 1));
    cr_assert_gt(pay, 0, "no chunk encoded on the device");
    /* a real pair is a measurement (perf/devsend-bench.sh), not a test */
    if (!(pair && *pair)) {
        cr_assert_leq((double)(h2d + d2h), 1.5 * (double)pay,
                      "a device sender moved %llu B for a %zu-byte payload",
                      (unsigned long long)(h2d + d2h), pay);
        cr_assert_leq((double)(rh2d + rd2h), 1.5 * (double)rpay,
                      "a device receiver moved %llu B for a %zu-byte payload",
                      (unsigned long long)(rh2d + rd2h), rpay);
    }
    free(base);
    free(next);
    dc_devsend_free(ds);
    dc_codec_free(cpu);
    dc_codec_free(dcod);
}
