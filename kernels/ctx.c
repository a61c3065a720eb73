/* ctx.c - the base-conditioned sparse chunk coding (ctx.h): the model
 * (classes by base magnitude), the payload, step words. */
#include "kernels/ctx.h"

#include "kernels/digest.h"
#include "kernels/kern_impl.h"
#include "kernels/kern_isa.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Estimated bits a class costs beyond its positions: its count, the
 * positions stream's length and parameter, the padding, its threshold.  A
 * split is made only where it saves more. */
#define DC_CTX_CLASS_BITS 40.0

unsigned dc_ctx_max_classes = 0;

struct dc_ctx {
    size_t max_bytes;
    uint32_t *idx;    /* ranks by class (max_bytes entries) */
    uint32_t *rnk;    /* ranks in element order (encoder) */
    uint8_t *cls;     /* classes in element order (encoder) */
    uint8_t *words;   /* step or new words (max_bytes) */
    uint8_t *bw;      /* the base words at the changed positions (max_bytes) */
    uint8_t *vtmp;    /* a candidate values stream */
    size_t vtmp_cap;
    uint8_t *ptmp;    /* a candidate gaps positions stream */
    size_t ptmp_cap;
    uint64_t ge[DC_CTX_SLAB * (DC_CTX_MAX_CLASSES - 1)];
};

dc_status_t dc_ctx_create(size_t max_bytes, dc_ctx_t **out)
{
    dc_ctx_t *x = calloc(1, sizeof(*x));
    if (!x)
        return dc_error(DC_ERR_NOMEM, "codec: ctx scratch");
    x->max_bytes = max_bytes;
    x->idx = malloc(max_bytes * sizeof(uint32_t));
    x->rnk = malloc(max_bytes * sizeof(uint32_t));
    x->cls = malloc(max_bytes);
    x->words = malloc(max_bytes);
    x->bw = malloc(max_bytes);
    x->vtmp_cap = dc_ent_val_bound(max_bytes, 1);
    x->vtmp = malloc(x->vtmp_cap);
    x->ptmp_cap = dc_ent_gaps_bound(max_bytes);
    x->ptmp = malloc(x->ptmp_cap);
    if (!x->idx || !x->rnk || !x->cls || !x->words || !x->bw || !x->vtmp || !x->ptmp) {
        dc_ctx_free(x);
        return dc_error(DC_ERR_NOMEM, "codec: ctx scratch for %zu-byte chunks", max_bytes);
    }
    *out = x;
    return DC_OK;
}

void dc_ctx_free(dc_ctx_t *x)
{
    if (!x)
        return;
    free(x->idx);
    free(x->rnk);
    free(x->cls);
    free(x->words);
    free(x->bw);
    free(x->vtmp);
    free(x->ptmp);
    free(x);
}

static unsigned dc_ctx_shift(unsigned w)
{
    return w == 1 ? 0 : w == 2 ? 7 : w == 4 ? 23 : 55;
}

static unsigned dc_ctx_nbuckets(unsigned w)
{
    return w == 1 ? 128 : 256;
}

/* (constant-size copies: a memcpy of w bytes would be a call per word) */
static inline uint64_t dc_ctx_word(const uint8_t *p, unsigned w)
{
    switch (w) {
    case 1: return p[0];
    case 2: return dc_load_le16(p);
    case 4: return dc_load_le32(p);
    default: return dc_load_le64(p);
    }
}

static inline void dc_ctx_put_word(uint8_t *p, unsigned w, uint64_t v)
{
    switch (w) {
    case 1: p[0] = (uint8_t)v; break;
    case 2: dc_store_le16(p, (uint16_t)v); break;
    case 4: dc_store_le32(p, (uint32_t)v); break;
    default: dc_store_le64(p, v); break;
    }
}

static inline unsigned dc_ctx_bucket(const uint8_t *p, unsigned w)
{
    uint64_t mag = dc_ctx_word(p, w) & ((1ull << (8 * w - 1)) - 1);
    return (unsigned)(mag >> dc_ctx_shift(w));
}

size_t dc_ctx_bound(size_t count, size_t n, unsigned w)
{
    return 1 + DC_CTX_MAX_CLASSES * (1 + 10 + 10) + 1 + dc_ent_pos_bound(count, n) +
           DC_CTX_MAX_CLASSES * 24 + dc_ent_val_bound(count, w);
}

/* bits of n elements of which c changed, as iid Bernoulli(c / n) */
static double dc_ctx_cost(double n, double c)
{
    if (n <= 0.0 || c <= 0.0 || c >= n)
        return 0.0;
    return n * dc_codec_h2(c / n);
}

/* The split of buckets [a, z) that saves the most bits (0 when none saves
 * more than DC_CTX_CLASS_BITS); PN / PC: prefix sums of elements and
 * changed elements per bucket. */
static unsigned dc_ctx_best_split(const double *PN, const double *PC, unsigned a, unsigned z,
                                  double *gain)
{
    double whole = dc_ctx_cost(PN[z] - PN[a], PC[z] - PC[a]);
    double best = DC_CTX_CLASS_BITS;
    unsigned bs = 0;
    if (whole <= best)
        return 0;
    for (unsigned s = a + 1; s < z; s++) {
        if (PN[s] == PN[s - 1])
            continue; /* an empty bucket: the same split as s - 1 */
        double g = whole - dc_ctx_cost(PN[s] - PN[a], PC[s] - PC[a]) -
                   dc_ctx_cost(PN[z] - PN[s], PC[z] - PC[s]);
        if (g > best) {
            best = g;
            bs = s;
        }
    }
    *gain = best;
    return bs;
}

size_t dc_ctx_sampled(size_t n)
{
    size_t stride = n >= 65536 ? 4096 : n >= 16384 ? 1024 : 64, sampled = 0;
    for (size_t i0 = 0; i0 < n; i0 += stride)
        sampled += DC_MIN(n, i0 + 64) - i0;
    return sampled;
}

/*
 * The classes: per magnitude bucket, the elements (sampled: 64 of every
 * 1024 in large chunks, so that the choice reads an eighth of the base)
 * and the changed elements (exact, from their base words bw), then greedy splits of the bucket range
 * where a split saves more than DC_CTX_CLASS_BITS.  Returns K; thr[0..K-2]
 * are the threshold buckets.
 */
static unsigned dc_ctx_model(const uint8_t *base, size_t n, unsigned w, const uint8_t *bw,
                             size_t count, unsigned *thr)
{
    if (count == 0 || count == n)
        return 1;
    /* two tables, alternate elements: runs of one bucket do not wait on
     * one counter */
    uint32_t N2[2][256] = {{0}}, hist[256];
    size_t stride = n >= 65536 ? 4096 : n >= 16384 ? 1024 : 64;
    for (size_t i0 = 0; i0 < n; i0 += stride) {
        size_t i1 = DC_MIN(n, i0 + 64);
        for (size_t i = i0; i < i1; i++)
            N2[i & 1][dc_ctx_bucket(base + i * w, w)]++;
    }
    for (unsigned b = 0; b < 256; b++)
        hist[b] = N2[0][b] + N2[1][b];
    return dc_ctx_model_hist(hist, n, w, bw, NULL, count, thr);
}

unsigned dc_ctx_model_hist(const uint32_t *hist, size_t n, unsigned w, const uint8_t *bw,
                           const uint32_t *bhist, size_t count, unsigned *thr)
{
    if (count == 0 || count == n)
        return 1;
    unsigned B = dc_ctx_nbuckets(w);
    uint32_t C2[2][256] = {{0}};
    double N[257], C[257];
    double scale = (double)n / (double)dc_ctx_sampled(n);
    if (bw)
        for (size_t k = 0; k < count; k++)
            C2[k & 1][dc_ctx_bucket(bw + k * w, w)]++;
    for (unsigned b = 0; b < B; b++) {
        N[b] = (double)hist[b];
        /* the same integer either way: a sum of counts */
        C[b] = bw ? (double)C2[0][b] + C2[1][b] : (double)bhist[b];
    }
    /* prefix sums */
    double PN[257], PC[257];
    PN[0] = PC[0] = 0.0;
    for (unsigned b = 0; b < B; b++) {
        double nb = N[b] * scale;
        if (nb < C[b])
            nb = C[b];
        PN[b + 1] = PN[b] + nb;
        PC[b + 1] = PC[b] + C[b];
    }
    /* segments [lo, hi) of buckets, sorted by lo; each with its best split
     * (0: none saves more than a class costs) and that split's gain */
    unsigned lo[DC_CTX_MAX_CLASSES + 1], split[DC_CTX_MAX_CLASSES], nseg = 1;
    double gain[DC_CTX_MAX_CLASSES];
    lo[0] = 0;
    lo[1] = B;
    split[0] = dc_ctx_best_split(PN, PC, 0, B, &gain[0]);
    unsigned kmax = dc_ctx_max_classes ? DC_MIN(dc_ctx_max_classes, DC_CTX_MAX_CLASSES)
                                       : DC_CTX_DEFAULT_CLASSES;
    while (nseg < kmax) {
        unsigned g = nseg;
        for (unsigned i = 0; i < nseg; i++)
            if (split[i] && (g == nseg || gain[i] > gain[g]))
                g = i;
        if (g == nseg)
            break;
        unsigned s = split[g];
        memmove(&lo[g + 2], &lo[g + 1], (nseg - g) * sizeof(lo[0]));
        memmove(&split[g + 2], &split[g + 1], (nseg - g - 1) * sizeof(split[0]));
        memmove(&gain[g + 2], &gain[g + 1], (nseg - g - 1) * sizeof(gain[0]));
        lo[g + 1] = s;
        nseg++;
        split[g] = dc_ctx_best_split(PN, PC, lo[g], lo[g + 1], &gain[g]);
        split[g + 1] = dc_ctx_best_split(PN, PC, lo[g + 1], lo[g + 2], &gain[g + 1]);
    }
    for (unsigned g = 1; g < nseg; g++)
        thr[g - 1] = lo[g];
    return nseg;
}

/* Positions of one class: Golomb into dst (cap bytes), or rANS gaps when
 * they apply and are at most 1/64 larger (faster to decode).  *gaps = 1
 * for gaps.  gs (gsl bytes; NULL: none): the class's Golomb stream made
 * elsewhere (a device sender) instead of idx, whose ranks are decoded into
 * dec only when the gaps coder is tried. */
static dc_status_t dc_ctx_pos_encode(dc_ctx_t *x, dc_ent_scratch_t *ent, unsigned layout,
                                     const uint32_t *idx, size_t cnt, uint64_t pop,
                                     const uint8_t *gs, size_t gsl, uint32_t *dec, uint8_t *dst,
                                     size_t cap, size_t *len, int *gaps)
{
    size_t glen = 0;
    dc_status_t gs_st = DC_ERR_BUSY;
    *gaps = 0;
    if (dc_codec_pos_method == DC_ENT_GAPS ||
        (dc_codec_pos_method == 0 && cnt >= DC_CODEC_GAPS_MIN &&
         layout == DC_CODEC_LAYOUT_SIMD)) {
        if (gs) {
            if (dc_ent_pos_decode(gs, gsl, cnt, pop, dec) != DC_OK) {
                dc_error_prefix("ctx: the given positions stream of %zu ranks", cnt);
                return DC_ERR_INVALID;
            }
            idx = dec;
        }
        gs_st = dc_ent_gaps_encode(ent, idx, cnt, pop, x->ptmp, x->ptmp_cap, &glen);
        if (gs_st != DC_OK && gs_st != DC_ERR_BUSY)
            return gs_st;
        if (gs_st == DC_OK && dc_codec_pos_method == DC_ENT_GAPS) {
            if (glen > cap)
                return dc_error(DC_ERR_BUSY, "ctx: positions past the output");
            memcpy(dst, x->ptmp, glen);
            *len = glen;
            *gaps = 1;
            return DC_OK;
        }
    }
    size_t plen;
    if (gs) {
        if (gsl > cap)
            return dc_error(DC_ERR_BUSY, "ctx: positions past the output");
        memcpy(dst, gs, gsl);
        plen = gsl;
    } else {
        dc_status_t s = dc_ent_pos_encode(idx, cnt, pop, dst, cap, &plen);
        if (s != DC_OK)
            return s;
    }
    if (gs_st == DC_OK && glen <= plen + plen / 64) {
        memcpy(dst, x->ptmp, glen);
        plen = glen;
        *gaps = 1;
    }
    *len = plen;
    return DC_OK;
}

/* zigzag of the step key(next) - key(base), mod 2^(8w) */
static inline uint64_t dc_ctx_step_word(uint64_t b, uint64_t nx, unsigned w)
{
    unsigned bits = 8 * w;
    uint64_t mask = w == 8 ? ~0ull : (1ull << bits) - 1;
    uint64_t d = (dc_ctx_key(nx, w) - dc_ctx_key(b, w)) & mask;
    uint64_t neg = 0 - ((d >> (bits - 1)) & 1);
    return ((d << 1) ^ (neg & mask)) & mask;
}

static inline uint64_t dc_ctx_apply_step(uint64_t b, uint64_t z, unsigned w)
{
    unsigned bits = 8 * w;
    uint64_t mask = w == 8 ? ~0ull : (1ull << bits) - 1;
    uint64_t d = ((z >> 1) ^ ((0 - (z & 1)) & mask)) & mask;
    return dc_ctx_unkey((dc_ctx_key(b, w) + d) & mask, w);
}

/* XOR words from the base words bw and the step words (mode 1) or new
 * words (mode 2); one loop per width (constant w: no call, no branch) */
static inline __attribute__((always_inline)) void
dc_ctx_to_xor_w(const uint8_t *bw, const uint8_t *words, uint8_t *xv, size_t count, unsigned w,
                unsigned mode)
{
    for (size_t k = 0; k < count; k++) {
        uint64_t b = dc_ctx_word(bw + k * w, w), v = dc_ctx_word(words + k * w, w);
        dc_ctx_put_word(xv + k * w, w, (mode == 1 ? dc_ctx_apply_step(b, v, w) : v) ^ b);
    }
}

static void dc_ctx_to_xor(const uint8_t *bw, const uint8_t *words, uint8_t *xv, size_t count,
                          unsigned w, unsigned mode)
{
    switch (w * 4 + mode) {
    case 1 * 4 + 1: dc_ctx_to_xor_w(bw, words, xv, count, 1, 1); break;
    case 1 * 4 + 2: dc_ctx_to_xor_w(bw, words, xv, count, 1, 2); break;
    case 2 * 4 + 1: dc_ctx_to_xor_w(bw, words, xv, count, 2, 1); break;
    case 2 * 4 + 2: dc_ctx_to_xor_w(bw, words, xv, count, 2, 2); break;
    case 4 * 4 + 1: dc_ctx_to_xor_w(bw, words, xv, count, 4, 1); break;
    case 4 * 4 + 2: dc_ctx_to_xor_w(bw, words, xv, count, 4, 2); break;
    case 8 * 4 + 1: dc_ctx_to_xor_w(bw, words, xv, count, 8, 1); break;
    default: dc_ctx_to_xor_w(bw, words, xv, count, 8, 2); break;
    }
}

/* The values stream chosen so far (mode 0: XOR words, in dst) and a
 * candidate that replaces it when smaller. */
typedef struct {
    int zstd_ok;
    uint8_t *dst;
    size_t cap, len;
    unsigned method, mode;
    double h; /* the chosen words' order-0 entropy, bits */
} dc_ctx_vals_t;

/* The step (mode 1) or new (mode 2) words of the count changed words into
 * words: their base words are bw, their XOR words xv (so the new words are
 * bw ^ xv: no pass over the target); one loop per width and mode, as
 * dc_ctx_to_xor. */
static inline __attribute__((always_inline)) void
dc_ctx_words_w(const uint8_t *bw, const uint8_t *xv, uint8_t *words, size_t count, unsigned w,
               unsigned mode)
{
    for (size_t k = 0; k < count; k++) {
        uint64_t b = dc_ctx_word(bw + k * w, w), nx = b ^ dc_ctx_word(xv + k * w, w);
        dc_ctx_put_word(words + k * w, w, mode == 1 ? dc_ctx_step_word(b, nx, w) : nx);
    }
}

static void dc_ctx_words(dc_ctx_t *x, const void *xorv, size_t count, unsigned w, unsigned mode)
{
    const uint8_t *xv = xorv;
    switch (w * 4 + mode) {
    case 1 * 4 + 1: dc_ctx_words_w(x->bw, xv, x->words, count, 1, 1); break;
    case 1 * 4 + 2: dc_ctx_words_w(x->bw, xv, x->words, count, 1, 2); break;
    case 2 * 4 + 1: dc_ctx_words_w(x->bw, xv, x->words, count, 2, 1); break;
    case 2 * 4 + 2: dc_ctx_words_w(x->bw, xv, x->words, count, 2, 2); break;
    case 4 * 4 + 1: dc_ctx_words_w(x->bw, xv, x->words, count, 4, 1); break;
    case 4 * 4 + 2: dc_ctx_words_w(x->bw, xv, x->words, count, 4, 2); break;
    case 8 * 4 + 1: dc_ctx_words_w(x->bw, xv, x->words, count, 8, 1); break;
    default: dc_ctx_words_w(x->bw, xv, x->words, count, 8, 2); break;
    }
}

/* The values stream in x->vtmp (len bytes, method m, of mode `mode`, the
 * words' entropy h) replaces v's when smaller. */
static void dc_ctx_keep(dc_ctx_t *x, dc_ctx_vals_t *v, size_t len, unsigned m, unsigned mode,
                        double h)
{
    if (len < v->len) {
        memcpy(v->dst, x->vtmp, len);
        v->len = len;
        v->method = m;
        v->mode = mode;
        v->h = h;
    }
}

/* Encode words (x->words; mode 1 or 2) and keep them in v when smaller. */
static dc_status_t dc_ctx_try_words(dc_ctx_t *x, dc_ent_scratch_t *ent, const void *words,
                                    size_t count, unsigned w, unsigned mode, dc_ctx_vals_t *v)
{
    size_t len;
    unsigned m;
    double h;
    dc_status_t s = dc_ent_val_encode_h(ent, words, count, w, v->zstd_ok, x->vtmp,
                                        x->vtmp_cap, &len, &m, &h);
    if (s == DC_OK)
        dc_ctx_keep(x, v, len, m, mode, h);
    return s;
}

/* Try mode 1 (steps) or 2 (new words) for the count changed words. */
static dc_status_t dc_ctx_try_values(dc_ctx_t *x, dc_ent_scratch_t *ent, const void *xorv,
                                     size_t count, unsigned w, unsigned mode, dc_ctx_vals_t *v)
{
    dc_ctx_words(x, xorv, count, w, mode);
    return dc_ctx_try_words(x, ent, x->words, count, w, mode, v);
}

/*
 * The values of 1- and 2-byte words: XOR words or steps, whichever has the
 * smaller order-0 entropy (their histograms: one rANS encode instead of
 * two; rANS codes either within its table of the entropy), then new words
 * where neither compresses.  *hx: the XOR words' entropy.
 */
static dc_status_t dc_ctx_values_narrow(dc_ctx_t *x, dc_ent_scratch_t *ent, const void *xorv,
                                        size_t count, unsigned w, dc_ctx_vals_t *v, double *hx)
{
    dc_status_t s;
    *hx = dc_ent_words_entropy_bits(ent, xorv, count, w);
    dc_ctx_words(x, xorv, count, w, 1);
    double hs = dc_ent_words_entropy_bits(ent, x->words, count, w);
    if (hs < *hx) {
        v->len = SIZE_MAX;
        if ((s = dc_ctx_try_words(x, ent, x->words, count, w, 1, v)) != DC_OK)
            return s;
    } else {
        s = dc_ent_val_encode_h(ent, xorv, count, w, v->zstd_ok, v->dst, v->cap, &v->len,
                                &v->method, &v->h);
        if (s != DC_OK)
            return s;
    }
    if (v->len > count * w / 2)
        return dc_ctx_try_values(x, ent, xorv, count, w, 2, v);
    return DC_OK;
}

/* dc_ent_val_encode_h of a device sender's words of mode `mode` (codec.h
 * dc_codec_vals_t): their rANS stream made on the device where that is
 * what dc_ent_val_encode_h keeps without trying the others (smaller than
 * the words, and at most a quarter of them where zstd is allowed: planes
 * and zstd are tried only otherwise); else the words fetched and coded
 * here. */
static dc_status_t dc_ctx_src_encode(const dc_codec_vals_t *vs, dc_ent_scratch_t *ent,
                                     unsigned mode, size_t count, unsigned w, int zstd_ok,
                                     uint8_t *dst, size_t cap, size_t *len, unsigned *method,
                                     double *h)
{
    size_t raw = count * w;
    dc_status_t s;
    if (vs->rans && dc_ent_val_force < 0 && cap >= dc_ent_val_bound(count, w)) {
        size_t l = 0;
        double hb = 0.0;
        s = vs->rans(vs->arg, mode, ent, dst, cap, &l, &hb);
        if (s != DC_OK && s != DC_ERR_BUSY)
            return s;
        if (s == DC_OK && l < raw && (!zstd_ok || l <= raw / 4)) {
            *len = l;
            *method = DC_ENT_RANS;
            *h = hb;
            return DC_OK;
        }
    }
    const void *words;
    if ((s = vs->words(vs->arg, mode, &words)) != DC_OK)
        return s;
    return dc_ent_val_encode_h(ent, words, count, w, zstd_ok, dst, cap, len, method, h);
}

/* dc_ctx_try_words for a device sender's words of mode `mode`. */
static dc_status_t dc_ctx_try_src(dc_ctx_t *x, dc_ent_scratch_t *ent, const dc_codec_vals_t *vs,
                                  size_t count, unsigned w, unsigned mode, dc_ctx_vals_t *v)
{
    size_t len;
    unsigned m;
    double h;
    dc_status_t s = dc_ctx_src_encode(vs, ent, mode, count, w, v->zstd_ok, x->vtmp, x->vtmp_cap,
                                      &len, &m, &h);
    if (s == DC_OK)
        dc_ctx_keep(x, v, len, m, mode, h);
    return s;
}

/* dc_ctx_values_narrow's choices with a device sender's values (codec.h
 * dc_codec_vals_t): its entropies, and only the chosen mode's stream or
 * words fetched. */
static dc_status_t dc_ctx_values_src(dc_ctx_t *x, dc_ent_scratch_t *ent,
                                     const dc_codec_vals_t *vs, size_t count, unsigned w,
                                     dc_ctx_vals_t *v, double *hx)
{
    dc_status_t s;
    *hx = vs->hx;
    if (vs->hs < vs->hx) {
        v->len = SIZE_MAX;
        if ((s = dc_ctx_try_src(x, ent, vs, count, w, 1, v)) != DC_OK)
            return s;
    } else if ((s = dc_ctx_src_encode(vs, ent, 0, count, w, v->zstd_ok, v->dst, v->cap, &v->len,
                                      &v->method, &v->h)) != DC_OK) {
        return s;
    }
    if (v->len > count * w / 2)
        return dc_ctx_try_src(x, ent, vs, count, w, 2, v);
    return DC_OK;
}

dc_status_t dc_ctx_encode(dc_ctx_t *x, dc_ent_scratch_t *ent, unsigned layout,
                          const void *base, size_t n, unsigned w, const uint32_t *pos,
                          const void *xorv, size_t count, uint8_t *dst, size_t cap, size_t *len,
                          unsigned *vm, dc_chunk_stats_t *st)
{
    const uint8_t *bb = base;
    if (n * w > x->max_bytes || count > n)
        return dc_error(DC_ERR_INVALID, "ctx: chunk of %zu x %u bytes exceeds context", n, w);
    if (cap < dc_ctx_bound(count, n, w))
        return dc_error(DC_ERR_BUSY, "ctx: output capacity %zu too small", cap);
    /* the base words of the changed elements, in one sparse pass (the next
     * words are these ^ xorv) */
    dc_kern_gather(base, w, pos, count, x->bw);
    unsigned thr[DC_CTX_MAX_CLASSES];
    unsigned K = dc_ctx_model(bb, n, w, x->bw, count, thr);
    uint64_t pop[DC_CTX_MAX_CLASSES];
    if (K > 1) {
        uint64_t thrm[DC_CTX_MAX_CLASSES];
        dc_ctx_thr_mag(thr, K, w, thrm);
        dc_kern_cur()->ctx->rank(base, n, w, thrm, K - 1, pos, count, x->cls, x->rnk, pop,
                                 x->ge);
    }
    return dc_ctx_encode_ranked(x, ent, layout, n, w, pos, xorv, x->bw, count, K, thr, x->cls,
                                x->rnk, NULL, pop, NULL, NULL, NULL, dst, cap, len, vm, st);
}

void dc_ctx_thr_mag(const unsigned *thr, unsigned K, unsigned w, uint64_t *thrm)
{
    for (unsigned j = 0; j + 1 < K; j++)
        thrm[j] = (uint64_t)thr[j] << dc_ctx_shift(w);
}

dc_status_t dc_ctx_encode_ranked(dc_ctx_t *x, dc_ent_scratch_t *ent, unsigned layout, size_t n,
                                 unsigned w, const uint32_t *pos, const void *xorv,
                                 const void *bw, size_t count, unsigned K, const unsigned *thr,
                                 const uint8_t *cls, const uint32_t *rnk, const uint64_t *ccnt,
                                 const uint64_t *cpop, const uint8_t *pg, const size_t *pgl,
                                 const dc_codec_vals_t *vs, uint8_t *dst, size_t cap,
                                 size_t *len, unsigned *vm, dc_chunk_stats_t *st)
{
    if (n * w > x->max_bytes || count > n || K < 1 || K > DC_CTX_MAX_CLASSES)
        return dc_error(DC_ERR_INVALID, "ctx: chunk of %zu x %u bytes (%u classes) exceeds "
                                        "context", n, w, K);
    if (cap < dc_ctx_bound(count, n, w))
        return dc_error(DC_ERR_BUSY, "ctx: output capacity %zu too small", cap);
    if (pg && (cls || (K > 1 && !ccnt)))
        return dc_error(DC_ERR_INVALID, "ctx: positions streams without grouped class counts");
    if (vs && (w > 2 || count == 0))
        return dc_error(DC_ERR_INVALID, "ctx: values on demand for %zu changes of %u bytes",
                        count, w);
    if (!vs && bw != x->bw)
        memcpy(x->bw, bw, count * w); /* the values' candidates read x->bw */
    unsigned nt = K - 1;
    uint64_t pop[DC_CTX_MAX_CLASSES];
    size_t cnt[DC_CTX_MAX_CLASSES] = {0}, off[DC_CTX_MAX_CLASSES + 1];
    const uint32_t *ranks = pos;
    if (K > 1 && !cls) {
        /* grouped already (listpack.h) */
        uint64_t sum = 0;
        off[0] = 0;
        for (unsigned c = 0; c < K; c++) {
            if (ccnt[c] > count - sum)
                return dc_error(DC_ERR_INVALID, "ctx: class counts past %zu changes", count);
            sum += ccnt[c];
            cnt[c] = (size_t)ccnt[c];
            off[c + 1] = off[c] + cnt[c];
            pop[c] = cpop[c];
        }
        if (sum != count)
            return dc_error(DC_ERR_INVALID, "ctx: class counts sum to %llu of %zu changes",
                            (unsigned long long)sum, count);
        ranks = rnk;
    } else if (K > 1) {
        for (size_t k = 0; k < count; k++) {
            if (cls[k] >= K)
                return dc_error(DC_ERR_INVALID, "ctx: change %zu in class %u of %u", k, cls[k],
                                K);
            cnt[cls[k]]++;
        }
        off[0] = 0;
        for (unsigned c = 0; c < K; c++) {
            off[c + 1] = off[c] + cnt[c];
            pop[c] = cpop[c];
        }
        size_t fill[DC_CTX_MAX_CLASSES];
        memcpy(fill, off, sizeof(fill));
        for (size_t k = 0; k < count; k++)
            x->idx[fill[cls[k]]++] = rnk[k];
        ranks = x->idx;
    } else {
        cnt[0] = count;
        pop[0] = n;
        off[0] = 0;
        off[1] = count;
    }
    /* header, thresholds, counts, gaps mask (filled below) */
    size_t o = 1;
    for (unsigned j = 0; j < nt; j++)
        dst[o++] = (uint8_t)thr[j];
    for (unsigned c = 0; c < K; c++)
        o += dc_ent_put_varint(dst + o, cnt[c]);
    size_t mask_at = o++;
    unsigned gmask = 0;
    double pos_bits = 0.0;
    size_t pgo = 0; /* class c's stream in pg */
    for (unsigned c = 0; c < K; c++) {
        pos_bits += dc_ctx_cost((double)pop[c], (double)cnt[c]);
        if (cnt[c] == 0)
            continue;
        size_t plen = 0;
        int gaps = 0;
        /* stream at o + 10, its length in front once known */
        const uint8_t *gs = pg ? pg + pgo : NULL;
        size_t gsl = pg ? pgl[c] : 0;
        pgo += gsl;
        dc_status_t s = dc_ctx_pos_encode(x, ent, layout, pg ? NULL : ranks + off[c], cnt[c],
                                          pop[c], gs, gsl, x->idx + off[c], dst + o + 10,
                                          cap - o - 10, &plen, &gaps);
        if (s != DC_OK)
            return s;
        uint8_t vb[10];
        size_t vl = dc_ent_put_varint(vb, plen);
        memmove(dst + o + vl, dst + o + 10, plen);
        memcpy(dst + o, vb, vl);
        o += vl + plen;
        gmask |= (unsigned)gaps << c;
    }
    dst[mask_at] = (uint8_t)gmask;
    /* values: XOR words, steps, (where neither compresses) new words; the
     * candidates come from the base words and the XOR words alone */
    dc_ctx_vals_t v = {.zstd_ok = count * w >= 2048, .dst = dst + o, .cap = cap - o};
    dc_status_t s;
    double hx;
    if (vs) {
        if ((s = dc_ctx_values_src(x, ent, vs, count, w, &v, &hx)) != DC_OK)
            return s;
    } else if (w <= 2 && count > 0) {
        if ((s = dc_ctx_values_narrow(x, ent, xorv, count, w, &v, &hx)) != DC_OK)
            return s;
    } else {
        s = dc_ent_val_encode_h(ent, xorv, count, w, v.zstd_ok, v.dst, v.cap, &v.len, &v.method,
                                &v.h);
        if (s != DC_OK)
            return s;
        hx = v.h;
        if (count > 0) {
            if ((s = dc_ctx_try_values(x, ent, xorv, count, w, 1, &v)) != DC_OK)
                return s;
            if (v.len > count * w / 2 &&
                (s = dc_ctx_try_values(x, ent, xorv, count, w, 2, &v)) != DC_OK)
                return s;
        }
    }
    unsigned mode = v.mode;
    size_t vlen = v.len;
    *vm = v.method;
    double hv = v.h;
    dst[0] = (uint8_t)(nt | (mode << 3));
    *len = o + vlen;
    if (st) {
        st->pos_bytes = o;
        st->val_bytes = vlen;
        st->payload_bytes = o + vlen;
        st->ctx_bound_bits = pos_bits + hv;
        st->bound_bits = dc_ctx_cost((double)n, (double)count) + hx;
    }
    return DC_OK;
}

/* The in-place patch fused with the merge (dc_ctx_decode_patch): after
 * each slab of the merge's scan, its XOR words (from steps or new words and
 * the base words the merge gathered), the XOR scatter into the chunk, and
 * the digest up to the slab's end, while the slab is in cache. */
typedef struct {
    uint8_t *chunk;
    const uint32_t *pos;
    const uint8_t *words, *bw; /* mode 1, 2: step or new words, base words */
    uint8_t *xv;               /* XOR words out (mode 0: in) */
    unsigned w, mode;
    size_t done; /* positions patched so far: pos[0..done) */
    void (*xor_scatter)(void *dst, unsigned w, const uint32_t *pos, const void *xorw, size_t count);
    dc_span_digest_t sd;
} dc_ctx_patch_t;

static void dc_ctx_to_xor(const uint8_t *bw, const uint8_t *words, uint8_t *xv, size_t count,
                          unsigned w, unsigned mode);

static void dc_ctx_patch_slab(void *arg, size_t e0, size_t e1, size_t k0, size_t k1)
{
    dc_ctx_patch_t *p = arg;
    unsigned w = p->w;
    (void)e0;
    if (k1 > k0) {
        if (p->mode)
            dc_ctx_to_xor(p->bw + k0 * w, p->words + k0 * w, p->xv + k0 * w, k1 - k0, w, p->mode);
        p->xor_scatter(p->chunk, w, p->pos + k0, p->xv + k0 * w, k1 - k0);
        p->done = k1;
    }
    dc_span_digest_advance(&p->sd, e1 * w);
}

static dc_status_t dc_ctx_decode_run(dc_ctx_t *x, dc_ent_scratch_t *ent, unsigned vm,
                                     const uint8_t *payload, size_t len, const void *base, size_t n,
                                     unsigned w, uint32_t *pos, void *xorv, size_t *count,
                                     dc_chunk_stats_t *st, dc_digest_t *dg)
{
    const uint8_t *p = payload, *end = payload + len;
    if (n * w > x->max_bytes)
        return dc_error(DC_ERR_FORMAT, "ctx chunk of %zu x %u bytes out of range", n, w);
    if (len < 1)
        return dc_error(DC_ERR_FORMAT, "ctx chunk: empty payload");
    unsigned h = *p++;
    unsigned K = (h & 7u) + 1, nt = K - 1, mode = (h >> 3) & 3u;
    if ((h & 0xe0u) || mode == 3)
        return dc_error(DC_ERR_FORMAT, "ctx chunk: unknown header bits 0x%02x", h);
    if ((size_t)(end - p) < nt)
        return dc_error(DC_ERR_FORMAT, "ctx chunk: thresholds truncated");
    unsigned B = dc_ctx_nbuckets(w), sh = dc_ctx_shift(w), prev = 0;
    uint64_t thrm[DC_CTX_MAX_CLASSES];
    for (unsigned j = 0; j < nt; j++) {
        unsigned t = *p++;
        if (t <= prev || t >= B)
            return dc_error(DC_ERR_FORMAT, "ctx chunk: threshold %u out of order or range", t);
        thrm[j] = (uint64_t)t << sh;
        prev = t;
    }
    size_t off[DC_CTX_MAX_CLASSES + 1], cnt[DC_CTX_MAX_CLASSES];
    uint64_t total = 0;
    off[0] = 0;
    for (unsigned c = 0; c < K; c++) {
        uint64_t v;
        if (dc_ent_get_varint(&p, end, &v) != DC_OK)
            return dc_error(DC_ERR_FORMAT, "ctx chunk: class counts truncated");
        if (v > n || total + v > n)
            return dc_error(DC_ERR_FORMAT, "ctx chunk claims more changes than its %zu elements",
                            n);
        cnt[c] = (size_t)v;
        total += v;
        off[c + 1] = (size_t)total;
    }
    if (p >= end)
        return dc_error(DC_ERR_FORMAT, "ctx chunk: gaps mask missing");
    unsigned gmask = *p++;
    if (gmask >> K)
        return dc_error(DC_ERR_FORMAT, "ctx chunk: gaps mask 0x%02x names absent classes", gmask);
    /* K == 1: the ranks are the positions */
    uint32_t *ranks = K == 1 && base ? pos : x->idx;
    for (unsigned c = 0; c < K; c++) {
        if (cnt[c] == 0) {
            if (gmask & (1u << c))
                return dc_error(DC_ERR_FORMAT, "ctx chunk: gaps named for an empty class");
            continue;
        }
        uint64_t plen;
        if (dc_ent_get_varint(&p, end, &plen) != DC_OK || plen > (uint64_t)(end - p))
            return dc_error(DC_ERR_FORMAT, "ctx chunk: class %u positions past the payload", c);
        dc_status_t s = (gmask & (1u << c))
                            ? dc_ent_gaps_decode(ent, p, (size_t)plen, cnt[c], n, ranks + off[c])
                            : dc_ent_pos_decode(p, (size_t)plen, cnt[c], n, ranks + off[c]);
        if (s != DC_OK)
            return s;
        p += plen;
    }
    size_t vlen = (size_t)(end - p);
    uint8_t *words = mode == 0 && xorv ? xorv : x->words;
    dc_status_t s = dc_ent_val_decode(ent, vm, p, vlen, (size_t)total, w, words);
    if (s != DC_OK)
        return s;
    *count = (size_t)total;
    if (st) {
        st->pos_bytes = (size_t)(p - payload);
        st->val_bytes = vlen;
        st->changed = total;
    }
    if (!base)
        return DC_OK;
    /* steps and new words need the base words: gathered by the merge's
     * scan where there is one */
    uint8_t *bw = mode ? x->bw : NULL;
    if (K > 1 && dg) {
        const dc_kern_isa_desc_t *isa = dc_kern_cur();
        dc_ctx_patch_t pt = {.chunk = (uint8_t *)base,
                             .pos = pos,
                             .words = words,
                             .bw = bw,
                             .xv = xorv,
                             .w = w,
                             .mode = mode,
                             .done = 0,
                             .xor_scatter = isa->kern->xor_scatter};
        dc_span_digest_init(&pt.sd, base, n * w);
        unsigned bad = isa->ctx->merge_slabs(base, n, w, thrm, nt, x->idx, off, pos, bw,
                                             dc_ctx_patch_slab, &pt, x->ge);
        if (bad) {
            /* XOR twice is none: the chunk as it was */
            pt.xor_scatter(pt.chunk, w, pos, xorv, pt.done);
            return dc_error(DC_ERR_FORMAT,
                            "ctx chunk: class %u names a position past its "
                            "population in the base",
                            bad - 1);
        }
        *dg = dc_span_digest_final(&pt.sd);
        return DC_OK;
    }
    if (K > 1) {
        unsigned bad =
            dc_kern_cur()->ctx->merge(base, n, w, thrm, nt, x->idx, off, pos, bw, x->ge);
        if (bad)
            return dc_error(DC_ERR_FORMAT, "ctx chunk: class %u names a position past its "
                                           "population in the base",
                            bad - 1);
    } else if (bw) {
        dc_kern_gather(base, w, pos, (size_t)total, bw);
    }
    if (mode)
        dc_ctx_to_xor(bw, words, xorv, (size_t)total, w, mode);
    if (dg)
        return dc_kern_patch_digest((void *)base, base, n, w, DC_PATCH_XOR, pos, xorv,
                                    (size_t)total, NULL, dg);
    return DC_OK;
}

dc_status_t dc_ctx_decode(dc_ctx_t *x, dc_ent_scratch_t *ent, unsigned vm, const uint8_t *payload,
                          size_t len, const void *base, size_t n, unsigned w, uint32_t *pos,
                          void *xorv, size_t *count, dc_chunk_stats_t *st)
{
    return dc_ctx_decode_run(x, ent, vm, payload, len, base, n, w, pos, xorv, count, st, NULL);
}

dc_status_t dc_ctx_decode_patch(dc_ctx_t *x, dc_ent_scratch_t *ent, unsigned vm,
                                const uint8_t *payload, size_t len, void *chunk, size_t n,
                                unsigned w, uint32_t *pos, void *xorv, size_t *count,
                                dc_digest_t *dg)
{
    return dc_ctx_decode_run(x, ent, vm, payload, len, chunk, n, w, pos, xorv, count, NULL, dg);
}
