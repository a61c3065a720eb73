/* codec.c - one chunk: pick the smallest exact encoding, encode, decode. */
#include "kernels/codec.h"

#include "kernels/ctx.h"
#include "kernels/entropy.h"
#include "kernels/kern.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

unsigned dc_codec_pos_method = 0;
unsigned dc_codec_force_kind = 0;

struct dc_codec {
    size_t max_bytes;
    dc_ent_scratch_t *ent;
    dc_golomb_dec_t *gd;
    unsigned layout;  /* DC_CODEC_LAYOUT_* */
    unsigned model;   /* DC_CODEC_MODEL_* */
    size_t last_count; /* XOR words in pos / vals1 of the last sparse decode
                          (SIZE_MAX: none) */
    dc_ctx_t *ctx;
    uint32_t *pos;   /* max_bytes entries (enough for any count <= n) */
    uint8_t *vals1;  /* max_bytes */
    uint8_t *vals2;  /* max_bytes */
};

double dc_codec_h2(double p)
{
    if (p <= 0.0 || p >= 1.0)
        return 0.0;
    return -(p * log2(p) + (1.0 - p) * log2(1.0 - p));
}

dc_status_t dc_codec_create(size_t max_bytes, dc_codec_t **out)
{
    if (max_bytes == 0 || max_bytes > DC_CODEC_MAX_CHUNK)
        return dc_error(DC_ERR_INVALID, "codec: chunk size %zu out of range", max_bytes);
    dc_codec_t *c = calloc(1, sizeof(*c));
    if (!c)
        return dc_error(DC_ERR_NOMEM, "codec context");
    c->max_bytes = max_bytes;
    c->last_count = SIZE_MAX;
    c->pos = malloc(max_bytes * sizeof(uint32_t));
    c->vals1 = malloc(max_bytes);
    c->vals2 = malloc(max_bytes);
    c->gd = malloc(sizeof(*c->gd));
    if (!c->pos || !c->vals1 || !c->vals2 || !c->gd ||
        dc_ent_scratch_create(max_bytes, &c->ent) != DC_OK ||
        dc_ctx_create(max_bytes, &c->ctx) != DC_OK) {
        dc_codec_free(c);
        return dc_error(DC_ERR_NOMEM, "codec context for %zu-byte chunks", max_bytes);
    }
    unsigned layout;
    dc_status_t st = dc_codec_layout_config(&layout);
    if (st != DC_OK) {
        dc_codec_free(c);
        return st;
    }
    dc_codec_set_layout(c, layout);
    unsigned model;
    if ((st = dc_codec_model_config(&model)) != DC_OK) {
        dc_codec_free(c);
        return st;
    }
    dc_codec_set_model(c, model);
    *out = c;
    return DC_OK;
}

dc_status_t dc_codec_layout_config(unsigned *layout)
{
    const char *v = dc_config_get("codec_layout");
    if (!v || !*v || strcmp(v, "simd") == 0)
        *layout = DC_CODEC_LAYOUT_SIMD;
    else if (strcmp(v, "compact") == 0)
        *layout = DC_CODEC_LAYOUT_COMPACT;
    else
        return dc_error(DC_ERR_INVALID, "codec_layout '%s' is not simd or compact", v);
    return DC_OK;
}

dc_status_t dc_codec_model_config(unsigned *model)
{
    const char *v = dc_config_get("codec_model");
    if (!v || !*v || strcmp(v, "ctx") == 0)
        *model = DC_CODEC_MODEL_CTX;
    else if (strcmp(v, "order0") == 0)
        *model = DC_CODEC_MODEL_ORDER0;
    else
        return dc_error(DC_ERR_INVALID, "codec_model '%s' is not ctx or order0", v);
    return DC_OK;
}

void dc_codec_set_model(dc_codec_t *c, unsigned model)
{
    c->model = model == DC_CODEC_MODEL_ORDER0 ? DC_CODEC_MODEL_ORDER0 : DC_CODEC_MODEL_CTX;
}

void dc_codec_set_layout(dc_codec_t *c, unsigned layout)
{
    c->layout = layout == DC_CODEC_LAYOUT_COMPACT ? DC_CODEC_LAYOUT_COMPACT
                                                  : DC_CODEC_LAYOUT_SIMD;
    dc_ent_scratch_set_max_ways(c->ent, c->layout == DC_CODEC_LAYOUT_SIMD ? 32 : 4);
}

void dc_codec_free(dc_codec_t *c)
{
    if (!c)
        return;
    dc_ent_scratch_free(c->ent);
    dc_ctx_free(c->ctx);
    free(c->pos);
    free(c->vals1);
    free(c->vals2);
    free(c->gd);
    free(c);
}

size_t dc_codec_payload_bound(size_t bytes)
{
    /* sparse: 2 varints + positions (count <= n/4) + values;
     * dense: values.  Positions bound for n elements is n/8 + 34*count/8. */
    size_t legacy = dc_ent_val_bound(bytes, 1) + dc_ent_pos_bound(bytes / 4 + 1, bytes) + 64;
    size_t ctx = dc_ctx_bound(bytes / 4 + 1, bytes, 1);
    return DC_MAX(legacy, ctx);
}

/* hbits (optional): the XOR words' order-0 entropy in bits, from the
 * histogram the coder builds anyway (xorv only). */
static dc_status_t dc_encode_dense(dc_codec_t *c, const uint8_t *xorv, const uint8_t *next,
                                   size_t n, unsigned w, uint8_t *dst, size_t cap, size_t *len,
                                   uint16_t *enc, dc_chunk_stats_t *st, double *hbits)
{
    size_t l1 = SIZE_MAX, l2 = SIZE_MAX;
    unsigned m1 = 0, m2 = 0;
    dc_status_t s;
    if (dc_codec_force_kind == DC_ENC_PUT_DENSE)
        xorv = NULL; /* (hbits: unknown) */
    if (xorv) {
        s = dc_ent_val_encode_h(c->ent, xorv, n, w, 1, dst, cap, &l1, &m1, hbits);
        if (s != DC_OK)
            return s;
        if (l1 <= n * w / 2 || dc_codec_force_kind == DC_ENC_XOR_DENSE) {
            *len = l1;
            *enc = dc_enc_make(DC_ENC_XOR_DENSE, 0, m1);
            goto done;
        }
    }
    /* overwrite: encode into vals2 first when we already hold an XOR result */
    if (xorv) {
        size_t cap2 = dc_ent_val_bound(n, w);
        uint8_t *tmp = malloc(cap2);
        if (!tmp)
            return dc_error(DC_ERR_NOMEM, "codec: dense overwrite buffer");
        s = dc_ent_val_encode(c->ent, next, n, w, 1, tmp, cap2, &l2, &m2);
        if (s == DC_OK && l2 < l1) {
            memcpy(dst, tmp, l2);
            *len = l2;
            *enc = dc_enc_make(DC_ENC_PUT_DENSE, 0, m2);
        } else {
            *len = l1;
            *enc = dc_enc_make(DC_ENC_XOR_DENSE, 0, m1);
        }
        free(tmp);
        if (s != DC_OK)
            return s;
    } else {
        s = dc_ent_val_encode(c->ent, next, n, w, 1, dst, cap, &l2, &m2);
        if (s != DC_OK)
            return s;
        *len = l2;
        *enc = dc_enc_make(DC_ENC_PUT_DENSE, 0, m2);
    }
done:
    if (st) {
        st->pos_bytes = 0;
        st->val_bytes = *len;
    }
    return DC_OK;
}

dc_status_t dc_codec_encode(dc_codec_t *c, const void *base, const void *next, size_t n,
                            unsigned w, uint8_t *dst, size_t cap, size_t *len, uint16_t *enc,
                            dc_chunk_stats_t *st)
{
    return dc_codec_encode_digest(c, base, next, n, w, dst, cap, len, enc, st, NULL, NULL);
}

/* A dense encoding as a chunk's final answer: encode, then report its
 * figures through *st (when not NULL); hbits as dc_encode_dense. */
static dc_status_t dc_encode_dense_stats(dc_codec_t *c, const uint8_t *xorv,
                                         const uint8_t *next, size_t n, unsigned w, uint8_t *dst,
                                         size_t cap, size_t *len, uint16_t *enc,
                                         dc_chunk_stats_t *s0, dc_chunk_stats_t *st,
                                         double *hbits)
{
    dc_status_t s = dc_encode_dense(c, xorv, next, n, w, dst, cap, len, enc, s0, hbits);
    if (s != DC_OK)
        return s;
    s0->payload_bytes = *len;
    if (st)
        *st = *s0;
    return DC_OK;
}

/* The order-0 sparse kinds (xor-sparse, put-sparse) of count changes
 * (pos, xorv; vals2 is scratch); the new words from next (gathered) or,
 * next NULL, bw ^ xorv (bw: the base words at pos).  *dense = 1 (and no
 * payload) when the positions are so pathological that a dense encoding
 * is smaller. */
static dc_status_t dc_encode_sparse0(dc_codec_t *c, size_t n, unsigned w, const uint32_t *pos,
                                     const void *xorv, size_t count, const void *next,
                                     const void *bw, uint8_t *dst, size_t cap, size_t *len,
                                     uint16_t *enc, dc_chunk_stats_t *s0, dc_chunk_stats_t *st,
                                     int *dense)
{
    dc_status_t s;
    *dense = 0;
    /* sparse: varint count, varint pos_len, positions, values */
    size_t h = dc_ent_put_varint(dst, count);
    size_t pcap = dc_ent_pos_bound(count, n);
    size_t plen;
    /* Positions: rANS-coded gaps decode several times faster (SIMD) than
     * Golomb codes; they are taken where at most 1/64 larger.  Where they
     * are within 1/64 of the iid bound n H(p) (which Golomb does not beat
     * by more than its table-free overhead) Golomb is not even tried.
     * (vals2 is free until the values are coded.) */
    unsigned pm = DC_ENT_GOLOMB;
    size_t glen = 0;
    dc_status_t gs = DC_ERR_BUSY;
    if (count > 0 && (dc_codec_pos_method == DC_ENT_GAPS ||
                      (dc_codec_pos_method == 0 && count >= DC_CODEC_GAPS_MIN &&
                       c->layout == DC_CODEC_LAYOUT_SIMD))) {
        gs = dc_ent_gaps_encode(c->ent, pos, count, n, c->vals2,
                                DC_MIN(pcap, c->max_bytes), &glen);
        if (gs != DC_OK && gs != DC_ERR_BUSY)
            return gs;
    }
    double pbound = (double)n * dc_codec_h2((double)count / (double)n);
    if (gs == DC_OK && (dc_codec_pos_method == DC_ENT_GAPS ||
                        (double)glen * 8.0 <= pbound * (1.0 + 1.0 / 64) + 512.0)) {
        memcpy(dst + h + 10, c->vals2, glen);
        plen = glen;
        pm = DC_ENT_GAPS;
    } else {
        s = dc_ent_pos_encode(pos, count, n, dst + h + 10, pcap, &plen);
        if (s != DC_OK)
            return s;
        if (gs == DC_OK && glen <= plen + plen / 64) {
            memcpy(dst + h + 10, c->vals2, glen);
            plen = glen;
            pm = DC_ENT_GAPS;
        }
    }
    uint8_t vb[10];
    size_t vl = dc_ent_put_varint(vb, plen);
    memmove(dst + h + vl, dst + h + 10, plen);
    memcpy(dst + h, vb, vl);
    h += vl + plen;
    size_t vlen;
    unsigned vm;
    int zstd_ok = count * w >= 2048;
    double hbits = 0.0; /* the XOR words' order-0 entropy, from the coder's histogram */
    s = dc_ent_val_encode_h(c->ent, xorv, count, w, zstd_ok, dst + h, cap - h, &vlen, &vm,
                            st ? &hbits : NULL);
    if (s != DC_OK)
        return s;
    if (st)
        s0->bound_bits = (double)n * dc_codec_h2((double)count / (double)n) + hbits;
    unsigned kind = DC_ENC_XOR_SPARSE;
    const unsigned fk = dc_codec_force_kind;
    if (count > 0 && fk != DC_ENC_XOR_SPARSE &&
        (vlen > count * w / 2 || fk == DC_ENC_PUT_SPARSE)) {
        /* XOR words barely compress: try the new values instead */
        if (next) {
            dc_kern_gather(next, w, pos, count, c->vals2);
        } else {
            const uint8_t *b = bw, *x = xorv;
            for (size_t k = 0; k < count * w; k++)
                c->vals2[k] = b[k] ^ x[k];
        }
        size_t cap2 = dc_ent_val_bound(count, w);
        uint8_t *tmp = malloc(cap2);
        if (!tmp)
            return dc_error(DC_ERR_NOMEM, "codec: sparse overwrite buffer");
        size_t l2;
        unsigned m2;
        s = dc_ent_val_encode(c->ent, c->vals2, count, w, zstd_ok, tmp, cap2, &l2, &m2);
        if (s == DC_OK && (l2 < vlen || fk == DC_ENC_PUT_SPARSE)) {
            memcpy(dst + h, tmp, l2);
            vlen = l2;
            vm = m2;
            kind = DC_ENC_PUT_SPARSE;
        }
        free(tmp);
        if (s != DC_OK)
            return s;
    }
    if (h + vlen > n * w + 16 && fk != DC_ENC_XOR_SPARSE && fk != DC_ENC_PUT_SPARSE) {
        *dense = 1; /* the caller encodes it dense */
        return DC_OK;
    }
    *len = h + vlen;
    *enc = dc_enc_make(kind, pm, vm);
    s0->pos_bytes = plen;
    s0->val_bytes = vlen;
    s0->payload_bytes = *len;
    if (st)
        *st = *s0;
    return DC_OK;
}

dc_status_t dc_codec_encode_digest(dc_codec_t *c, const void *base, const void *next, size_t n,
                                   unsigned w, uint8_t *dst, size_t cap, size_t *len,
                                   uint16_t *enc, dc_chunk_stats_t *st, dc_digest_t *base_dg,
                                   dc_digest_t *next_dg)
{
    size_t bytes = n * w;
    if ((w != 1 && w != 2 && w != 4 && w != 8) || n > UINT32_MAX || bytes > c->max_bytes)
        return dc_error(DC_ERR_INVALID, "codec: chunk of %zu x %u bytes exceeds context", n, w);
    if (cap < dc_codec_payload_bound(bytes))
        return dc_error(DC_ERR_INVALID, "codec: output capacity %zu too small", cap);
    dc_chunk_stats_t s0 = {.n = n, .changed = UINT64_MAX, .bound_bits = -1.0,
                           .ctx_bound_bits = -1.0};
    dc_status_t s;
    if (!base) {
        if (next_dg)
            *next_dg = dc_digest128(next, bytes);
        return dc_encode_dense_stats(c, NULL, next, n, w, dst, cap, len, enc, &s0, st, NULL);
    }
    size_t cap_sparse = n / 4;
    size_t count = base_dg || next_dg
                       ? dc_kern_diff_digest(base, next, n, w, c->pos, c->vals1, cap_sparse,
                                             base_dg, next_dg)
                       : dc_kern_diff(base, next, n, w, c->pos, c->vals1, cap_sparse);
    s0.changed = count;
    const unsigned fk = dc_codec_force_kind;
    if (count > cap_sparse || fk == DC_ENC_XOR_DENSE || fk == DC_ENC_PUT_DENSE) {
        memcpy(c->vals1, next, bytes);
        dc_kern_xor_dense(c->vals1, base, bytes);
        return dc_encode_dense_stats(c, c->vals1, next, n, w, dst, cap, len, enc, &s0, st,
                                     st ? &s0.bound_bits : NULL);
    }
    if ((c->model == DC_CODEC_MODEL_CTX && fk != DC_ENC_XOR_SPARSE && fk != DC_ENC_PUT_SPARSE) ||
        fk == DC_ENC_CTX) {
        size_t clen;
        unsigned vm;
        s = dc_ctx_encode(c->ctx, c->ent, c->layout, base, n, w, c->pos, c->vals1, count, dst,
                          cap, &clen, &vm, &s0);
        if (s != DC_OK)
            return s;
        if (clen > bytes + 16 && fk != DC_ENC_CTX) {
            /* pathological: a dense encoding is never larger than raw */
            s0.ctx_bound_bits = -1.0;
            memcpy(c->vals1, next, bytes);
            dc_kern_xor_dense(c->vals1, base, bytes);
            return dc_encode_dense_stats(c, c->vals1, next, n, w, dst, cap, len, enc, &s0, st,
                                         NULL);
        }
        *len = clen;
        *enc = dc_enc_make(DC_ENC_CTX, 0, vm);
        if (st)
            *st = s0;
        return DC_OK;
    }
    int dense = 0;
    s = dc_encode_sparse0(c, n, w, c->pos, c->vals1, count, next, NULL, dst, cap, len, enc, &s0,
                          st, &dense);
    if (s != DC_OK || !dense)
        return s;
    /* pathological positions: a dense encoding is never larger than raw */
    memcpy(c->vals1, next, bytes);
    dc_kern_xor_dense(c->vals1, base, bytes);
    return dc_encode_dense_stats(c, c->vals1, next, n, w, dst, cap, len, enc, &s0, st, NULL);
}

_Static_assert(DC_CODEC_MAX_CLASSES == DC_CTX_MAX_CLASSES, "codec.h names ctx.h's class limit");

unsigned dc_codec_model(const dc_codec_t *c)
{
    return c->model;
}

double dc_codec_words_entropy_bits(dc_codec_t *c, const void *v, size_t count, unsigned w)
{
    return dc_ent_words_entropy_bits(c->ent, v, count, w);
}

unsigned dc_codec_lists_classes(dc_codec_t *c, const uint32_t *hist, size_t n, unsigned w,
                                const void *bw, const uint32_t *bhist, size_t count,
                                unsigned *thr, uint64_t *thrm)
{
    if (c->model != DC_CODEC_MODEL_CTX || count > n / 4)
        return 1;
    unsigned K = dc_ctx_model_hist(hist, n, w, bw, bhist, count, thr);
    dc_ctx_thr_mag(thr, K, w, thrm);
    return K;
}

dc_status_t dc_codec_encode_lists(dc_codec_t *c, const dc_codec_lists_t *L, uint8_t *dst,
                                  size_t cap, size_t *len, uint16_t *enc, dc_chunk_stats_t *st)
{
    size_t n = L->n, bytes = n * L->w, count = L->count;
    unsigned w = L->w;
    if ((w != 1 && w != 2 && w != 4 && w != 8) || n > UINT32_MAX || bytes > c->max_bytes)
        return dc_error(DC_ERR_INVALID, "codec: chunk of %zu x %u bytes exceeds context", n, w);
    if (cap < dc_codec_payload_bound(bytes))
        return dc_error(DC_ERR_INVALID, "codec: output capacity %zu too small", cap);
    if (count > n / 4)
        return dc_error(DC_ERR_UNSUPPORTED, "dense chunk (%zu of %zu elements changed): the "
                                            "dense kinds need the whole chunk", count, n);
    dc_chunk_stats_t s0 = {.n = n, .changed = count, .bound_bits = -1.0,
                           .ctx_bound_bits = -1.0};
    dc_status_t s;
    if (c->model == DC_CODEC_MODEL_CTX) {
        size_t clen;
        unsigned vm;
        s = dc_ctx_encode_ranked(c->ctx, c->ent, c->layout, n, w, L->pos, L->xorv, L->bw, count,
                                 L->K, L->thr, L->cls, L->rnk, L->ccnt, L->pop, L->pg, L->pgl,
                                 L->vals, dst, cap, &clen, &vm, &s0);
        if (s != DC_OK)
            return s;
        if (clen > bytes + 16)
            return dc_error(DC_ERR_UNSUPPORTED, "ctx-sparse payload of %zu bytes larger than "
                                                "the %zu-byte chunk: dense", clen, bytes);
        *len = clen;
        *enc = dc_enc_make(DC_ENC_CTX, 0, vm);
        if (st)
            *st = s0;
        return DC_OK;
    }
    if (L->vals || L->pg)
        return dc_error(DC_ERR_INVALID, "codec: values on demand and positions streams are "
                                        "the ctx model's");
    int dense = 0;
    s = dc_encode_sparse0(c, n, w, L->pos, L->xorv, count, NULL, L->bw, dst, cap, len, enc, &s0,
                          st, &dense);
    if (s == DC_OK && dense)
        return dc_error(DC_ERR_UNSUPPORTED, "sparse payload larger than the %zu-byte chunk: "
                                            "dense", bytes);
    return s;
}

/* The chunk geometry and the encoding field, before any stream is read:
 * a known kind and values method, Golomb positions for the sparse kinds
 * and none for the dense ones. */
static dc_status_t dc_check_enc(const dc_codec_t *c, uint16_t enc, size_t n, unsigned w)
{
    unsigned kind = dc_enc_kind(enc), pm = dc_enc_pos_method(enc), vm = dc_enc_val_method(enc);
    if ((w != 1 && w != 2 && w != 4 && w != 8) || n == 0 || n > UINT32_MAX ||
        n * w > c->max_bytes)
        return dc_error(DC_ERR_FORMAT, "chunk of %zu x %u bytes out of range", n, w);
    if (kind < 1 || kind > DC_ENC_KIND_MAX || vm >= DC_ENT_GOLOMB)
        return dc_error(DC_ERR_FORMAT, "bad chunk encoding 0x%04x", enc);
    if ((kind == DC_ENC_XOR_DENSE || kind == DC_ENC_PUT_DENSE || kind == DC_ENC_CTX) && pm != 0)
        return dc_error(DC_ERR_FORMAT, "%s chunk names a positions method",
                        dc_enc_kind_name(kind));
    if ((kind == DC_ENC_XOR_SPARSE || kind == DC_ENC_PUT_SPARSE) && pm != DC_ENT_GOLOMB &&
        pm != DC_ENT_GAPS)
        return dc_error(DC_ERR_FORMAT, "sparse chunk without Golomb or gaps positions");
    return DC_OK;
}

/* How much of a chunk the decoders prefetch for the patch that follows:
 * half the L2 (what the positions and values they write leave of it), at
 * most 1 MiB (a whole 4 MiB chunk would evict its own beginning: slower
 * than none). */
static size_t dc_prefetch_budget(void)
{
    static _Atomic size_t budget;
    size_t b = atomic_load_explicit(&budget, memory_order_relaxed);
    if (b == 0) {
        long l2 = -1;
#ifdef _SC_LEVEL2_CACHE_SIZE
        l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
        b = l2 > 0 ? DC_MIN((size_t)l2 / 2, (size_t)1 << 20) : (size_t)256 << 10;
        atomic_store_explicit(&budget, b, memory_order_relaxed);
    }
    return b;
}

/* Decode the streams of a payload into c->pos / c->vals1.  *count gets the
 * number of words decoded into vals1.  chunk (may be NULL): the memory the
 * caller patches next, prefetched while the streams decode. */
static dc_status_t dc_decode_streams(dc_codec_t *c, uint16_t enc, const uint8_t *payload,
                                     size_t len, size_t n, unsigned w, size_t *count,
                                     dc_chunk_stats_t *st, const void *chunk)
{
    unsigned kind = dc_enc_kind(enc), vm = dc_enc_val_method(enc);
    dc_status_t s = dc_check_enc(c, enc, n, w);
    if (s != DC_OK)
        return s;
    if (kind == DC_ENC_XOR_DENSE || kind == DC_ENC_PUT_DENSE) {
        s = dc_ent_val_decode(c->ent, vm, payload, len, n, w, c->vals1);
        if (s != DC_OK)
            return s;
        *count = n;
        if (st) {
            st->pos_bytes = 0;
            st->val_bytes = len;
        }
        return DC_OK;
    }
    if (kind == DC_ENC_CTX)
        return dc_ctx_decode(c->ctx, c->ent, vm, payload, len, chunk, n, w, c->pos, c->vals1,
                             count, st);
    const uint8_t *p = payload, *end = payload + len;
    uint64_t cnt, plen;
    if (dc_ent_get_varint(&p, end, &cnt) != DC_OK || dc_ent_get_varint(&p, end, &plen) != DC_OK)
        return dc_error(DC_ERR_FORMAT, "sparse chunk header truncated");
    if (cnt > n)
        return dc_error(DC_ERR_FORMAT, "sparse chunk claims %llu changes in %zu elements",
                        (unsigned long long)cnt, n);
    if (plen > (uint64_t)(end - p))
        return dc_error(DC_ERR_FORMAT, "positions stream longer than the payload");
    if (dc_enc_pos_method(enc) == DC_ENT_GAPS) {
        /* the values first (SIMD rANS, their own tables), then the
         * positions, asking for the chunk to patch as they go */
        dc_gaps_dec_t gd;
        dc_ent_pf_t pf = {chunk, DC_MIN(n * w, dc_prefetch_budget())};
        if ((s = dc_gaps_dec_init(c->ent, &gd, p, (size_t)plen, (size_t)cnt, n)) != DC_OK ||
            (s = dc_ent_val_decode(c->ent, vm, p + plen, (size_t)(end - p - plen), (size_t)cnt,
                                   w, c->vals1)) != DC_OK ||
            (cnt && (s = dc_gaps_dec_run(&gd, c->pos, (size_t)cnt, chunk ? &pf : NULL)) !=
                        DC_OK) ||
            (s = dc_gaps_dec_finish(&gd)) != DC_OK)
            return s;
        *count = (size_t)cnt;
        if (st) {
            st->pos_bytes = plen;
            st->val_bytes = (size_t)(end - p - plen);
        }
        return DC_OK;
    }
    if ((s = dc_golomb_dec_init(c->gd, p, (size_t)plen, (size_t)cnt, n)) != DC_OK)
        return s;
    p += plen;
    if (vm == DC_ENT_RANS && w <= 2 && cnt > 0) {
        /* positions and values decoded in one interleaved loop */
        dc_rans_dec_t rd;
        dc_ent_pf_t pf = {chunk, DC_MIN(n * w, dc_prefetch_budget())};
        if ((s = dc_rans_dec_init(c->ent, &rd, p, (size_t)(end - p), (size_t)cnt, 8 * w)) !=
                DC_OK ||
            (s = dc_ent_sparse_run(c->gd, &rd, c->pos, c->vals1, (size_t)cnt,
                                   chunk ? &pf : NULL)) != DC_OK ||
            (s = dc_rans_dec_finish(&rd)) != DC_OK)
            return s;
    } else {
        if ((s = dc_golomb_dec_run(c->gd, c->pos, (size_t)cnt)) != DC_OK ||
            (s = dc_ent_val_decode(c->ent, vm, p, (size_t)(end - p), (size_t)cnt, w, c->vals1)) !=
                DC_OK)
            return s;
    }
    if ((s = dc_golomb_dec_finish(c->gd)) != DC_OK)
        return s;
    *count = (size_t)cnt;
    if (st) {
        st->pos_bytes = plen;
        st->val_bytes = (size_t)(end - p);
    }
    return DC_OK;
}

/* PUT_SPARSE's new words as XOR words against the baseline `base` (so
 * that every sparse kind is applied, and undone, as XOR words) */
static dc_status_t dc_put_to_xor(dc_codec_t *c, const void *base, size_t n, unsigned w,
                                 size_t count)
{
    (void)n; /* the positions decoders checked them: increasing, < n */
    dc_kern_gather(base, w, c->pos, count, c->vals2);
    dc_kern_xor_dense(c->vals1, c->vals2, count * w);
    return DC_OK;
}

dc_status_t dc_codec_decode(dc_codec_t *c, uint16_t enc, const uint8_t *payload, size_t len,
                            void *dst, size_t n, unsigned w)
{
    size_t count;
    c->last_count = SIZE_MAX;
    dc_status_t s = dc_decode_streams(c, enc, payload, len, n, w, &count, NULL, dst);
    if (s != DC_OK)
        return s;
    switch (dc_enc_kind(enc)) {
    case DC_ENC_PUT_SPARSE:
        if ((s = dc_put_to_xor(c, dst, n, w, count)) != DC_OK)
            return s;
        /* now XOR words */
        /* fall through */
    case DC_ENC_XOR_SPARSE:
    case DC_ENC_CTX:
        s = dc_kern_xor_scatter(dst, n, w, c->pos, c->vals1, count);
        if (s == DC_OK)
            c->last_count = count;
        return s;
    case DC_ENC_XOR_DENSE:
        dc_kern_xor_dense(dst, c->vals1, n * w);
        return DC_OK;
    default:
        memcpy(dst, c->vals1, n * w);
        return DC_OK;
    }
}

dc_status_t dc_codec_decode_digest(dc_codec_t *c, uint16_t enc, const uint8_t *payload,
                                   size_t len, const void *src, void *dst, size_t n, unsigned w,
                                   dc_digest_t *src_dg, dc_digest_t *dst_dg)
{
    size_t count;
    unsigned kind = dc_enc_kind(enc);
    c->last_count = SIZE_MAX;
    if (!src && kind != DC_ENC_PUT_DENSE && kind >= 1 && kind <= DC_ENC_KIND_MAX)
        return dc_error(DC_ERR_INVALID, "codec: encoding 0x%04x needs a baseline", enc);
    if (kind == DC_ENC_CTX && src == dst && dst_dg && !src_dg) {
        /* in place: the patch and the digest ride on the decoder's scan of
         * the chunk (one pass over it instead of two) */
        dc_status_t s = dc_check_enc(c, enc, n, w);
        if (s != DC_OK)
            return s;
        s = dc_ctx_decode_patch(c->ctx, c->ent, dc_enc_val_method(enc), payload, len, dst, n, w,
                                c->pos, c->vals1, &count, dst_dg);
        /* pos / vals1 hold every position and XOR word (the undo record) */
        if (s == DC_OK)
            c->last_count = count;
        return s;
    }
    /* the patch reads the baseline first (in place: the chunk itself) */
    dc_status_t s = dc_decode_streams(c, enc, payload, len, n, w, &count, NULL, src ? src : dst);
    if (s != DC_OK)
        return s;
    unsigned op;
    switch (kind) {
    case DC_ENC_PUT_SPARSE:
        if ((s = dc_put_to_xor(c, src ? src : dst, n, w, count)) != DC_OK)
            return s;
        op = DC_PATCH_XOR;
        break;
    case DC_ENC_XOR_SPARSE: op = DC_PATCH_XOR; break;
    case DC_ENC_CTX: op = DC_PATCH_XOR; break;
    case DC_ENC_XOR_DENSE: op = DC_PATCH_XOR_DENSE; break;
    default: op = DC_PATCH_PUT_DENSE; break;
    }
    s = dc_kern_patch_digest(dst, src, n, w, op, c->pos, c->vals1, count, src_dg, dst_dg);
    if (s == DC_OK && op == DC_PATCH_XOR)
        c->last_count = count;
    return s;
}

dc_status_t dc_codec_decode_lists(dc_codec_t *c, uint16_t enc, const uint8_t *payload,
                                  size_t len, size_t n, unsigned w, const uint32_t **pos,
                                  const uint8_t **words, size_t *count)
{
    unsigned kind = dc_enc_kind(enc);
    c->last_count = SIZE_MAX;
    if (kind != DC_ENC_XOR_SPARSE && kind != DC_ENC_PUT_SPARSE && kind != DC_ENC_XOR_DENSE &&
        kind != DC_ENC_PUT_DENSE)
        return dc_error(DC_ERR_UNSUPPORTED, "codec: %s payloads are decoded against the "
                        "baseline, not into lists", kind >= 1 && kind <= DC_ENC_KIND_MAX
                                                       ? dc_enc_kind_name(kind) : "unknown");
    size_t cnt;
    dc_status_t s = dc_decode_streams(c, enc, payload, len, n, w, &cnt, NULL, NULL);
    if (s != DC_OK)
        return s;
    *pos = kind == DC_ENC_XOR_SPARSE || kind == DC_ENC_PUT_SPARSE ? c->pos : NULL;
    *words = c->vals1;
    *count = cnt;
    if (kind == DC_ENC_XOR_SPARSE)
        c->last_count = cnt;
    return DC_OK;
}

dc_status_t dc_codec_sparse_header(dc_codec_t *c, uint16_t enc, const uint8_t *payload,
                                   size_t len, size_t n, unsigned w, size_t *count,
                                   size_t *pos_ofs, size_t *pos_len)
{
    c->last_count = SIZE_MAX;
    if (dc_enc_kind(enc) != DC_ENC_XOR_SPARSE && dc_enc_kind(enc) != DC_ENC_PUT_SPARSE)
        return dc_error(DC_ERR_UNSUPPORTED, "codec: only xor-sparse and put-sparse payloads "
                        "have positions to decode alone");
    dc_status_t s = dc_check_enc(c, enc, n, w);
    if (s != DC_OK)
        return s;
    const uint8_t *p = payload, *end = payload + len;
    uint64_t cnt, plen;
    if (dc_ent_get_varint(&p, end, &cnt) != DC_OK || dc_ent_get_varint(&p, end, &plen) != DC_OK)
        return dc_error(DC_ERR_FORMAT, "sparse chunk header truncated");
    if (cnt > n)
        return dc_error(DC_ERR_FORMAT, "sparse chunk claims %llu changes in %zu elements",
                        (unsigned long long)cnt, n);
    if (plen > (uint64_t)(end - p))
        return dc_error(DC_ERR_FORMAT, "positions stream longer than the payload");
    *count = (size_t)cnt;
    *pos_ofs = (size_t)(p - payload);
    *pos_len = (size_t)plen;
    return DC_OK;
}

dc_status_t dc_codec_decode_positions(dc_codec_t *c, uint16_t enc, const uint8_t *payload,
                                      size_t len, size_t n, unsigned w, const uint32_t **pos,
                                      size_t *count, size_t *vals_ofs)
{
    size_t cnt = 0, pofs = 0, plen = 0; /* (set on DC_OK; -O3 cannot tell) */
    dc_status_t s = dc_codec_sparse_header(c, enc, payload, len, n, w, &cnt, &pofs, &plen);
    if (s != DC_OK)
        return s;
    const uint8_t *p = payload + pofs;
    if (dc_enc_pos_method(enc) == DC_ENT_GAPS) {
        dc_gaps_dec_t gd;
        if ((s = dc_gaps_dec_init(c->ent, &gd, p, (size_t)plen, (size_t)cnt, n)) != DC_OK ||
            (cnt && (s = dc_gaps_dec_run(&gd, c->pos, (size_t)cnt, NULL)) != DC_OK) ||
            (s = dc_gaps_dec_finish(&gd)) != DC_OK)
            return s;
    } else if ((s = dc_golomb_dec_init(c->gd, p, (size_t)plen, (size_t)cnt, n)) != DC_OK ||
               (s = dc_golomb_dec_run(c->gd, c->pos, (size_t)cnt)) != DC_OK ||
               (s = dc_golomb_dec_finish(c->gd)) != DC_OK) {
        return s;
    }
    *pos = c->pos;
    *count = (size_t)cnt;
    *vals_ofs = (size_t)(p + plen - payload);
    return DC_OK;
}

dc_status_t dc_codec_values_recode(dc_codec_t *c, const void *words, size_t count, unsigned w,
                                   uint8_t *dst, size_t cap, size_t *len, unsigned *method)
{
    return dc_ent_val_encode(c->ent, words, count, w, 0, dst, cap, len, method);
}

dc_status_t dc_codec_undo_payload(dc_codec_t *c, size_t n, unsigned w, uint8_t *dst, size_t cap,
                                  size_t *len, uint16_t *enc)
{
    size_t count = c->last_count;
    if (count == SIZE_MAX)
        return dc_error(DC_ERR_INVALID, "codec: no sparse chunk decoded to undo");
    if (cap < dc_codec_payload_bound(n * w))
        return dc_error(DC_ERR_INVALID, "codec: output capacity %zu too small", cap);
    /* varint count, varint positions length, Golomb positions, values */
    size_t h = dc_ent_put_varint(dst, count), plen, vlen;
    uint8_t vb[10];
    dc_status_t s = dc_ent_pos_encode(c->pos, count, n, dst + h + 10,
                                      dc_ent_pos_bound(count, n), &plen);
    if (s != DC_OK)
        return s;
    size_t vl = dc_ent_put_varint(vb, plen);
    memmove(dst + h + vl, dst + h + 10, plen);
    memcpy(dst + h, vb, vl);
    h += vl + plen;
    unsigned vm;
    if ((s = dc_ent_val_encode(c->ent, c->vals1, count, w, 0, dst + h, cap - h, &vlen, &vm)) !=
        DC_OK)
        return s;
    *len = h + vlen;
    *enc = dc_enc_make(DC_ENC_XOR_SPARSE, DC_ENT_GOLOMB, vm);
    return DC_OK;
}

dc_status_t dc_codec_inspect(dc_codec_t *c, uint16_t enc, const uint8_t *payload, size_t len,
                             size_t n, unsigned w, dc_chunk_stats_t *st)
{
    dc_chunk_stats_t s0 = {.n = n, .changed = UINT64_MAX, .bound_bits = -1.0,
                           .ctx_bound_bits = -1.0, .payload_bytes = len};
    size_t count;
    c->last_count = SIZE_MAX;
    dc_status_t s = dc_decode_streams(c, enc, payload, len, n, w, &count, &s0, NULL);
    if (s != DC_OK)
        return s;
    unsigned kind = dc_enc_kind(enc);
    if (kind == DC_ENC_XOR_SPARSE) {
        s0.changed = count;
        s0.bound_bits = (double)n * dc_codec_h2((double)count / (double)n) +
                        dc_ent_words_entropy_bits(c->ent, c->vals1, count, w);
    } else if (kind == DC_ENC_CTX) {
        s0.changed = count; /* without the base: streams checked, bounds unknown */
    } else if (kind == DC_ENC_PUT_SPARSE) {
        s0.changed = count; /* an upper bound: some puts may rewrite equal bytes */
    } else if (kind == DC_ENC_XOR_DENSE) {
        /* count nonzero XOR words */
        size_t nz = 0;
        const uint8_t *v = c->vals1;
        for (size_t i = 0; i < n; i++) {
            uint64_t x = 0;
            memcpy(&x, v + i * w, w);
            nz += x != 0;
        }
        s0.changed = nz;
        s0.bound_bits = dc_ent_words_entropy_bits(c->ent, c->vals1, n, w);
    }
    if (st)
        *st = s0;
    return DC_OK;
}
