/* kern_cuda_ctx.c - a ctx-sparse payload decoded and applied on the device
 * (kern_cuda.h dc_kern_cuda_ctx_*): the header on the host, the streams on
 * the device where a device decoder exists. */
#include "kernels/entropy.h"
#include "kernels/kern_cuda.h"

#include <stdlib.h>
#include <string.h>

struct dc_kern_cuda_ctx {
    size_t max_bytes;
    void *dbuf; /* device: ranks | words | streams */
    size_t dcap;
    dc_ent_scratch_t *ent; /* host decoders (gaps positions, zstd values) */
    uint8_t *hbuf;         /* host: ranks or words decoded there */
    size_t hcap;
    void *gbuf;            /* device: a gaps stream's parts and quotients */
    size_t gcap;
    uint64_t *escpre;      /* host: a gaps stream's escape prefix sums */
    size_t esccap;
};

/* ctx.c dc_ctx_shift / dc_ctx_nbuckets (the format's constants) */
static unsigned kc_shift(unsigned w)
{
    return w == 1 ? 0 : w == 2 ? 7 : w == 4 ? 23 : 55;
}

static unsigned kc_nbuckets(unsigned w)
{
    return w == 1 ? 128 : 256;
}

/* The checks and messages of ctx.c dc_ctx_decode_run up to the values
 * stream, without decoding the streams. */
dc_status_t dc_kern_cuda_ctx_parse(const uint8_t *payload, size_t len, size_t n, unsigned w,
                                   dc_kern_cuda_ctx_hdr_t *h)
{
    const uint8_t *p = payload, *end = payload + len;
    memset(h, 0, sizeof(*h));
    if (w != 1 && w != 2 && w != 4 && w != 8)
        return dc_error(DC_ERR_INVALID, "ctx chunk: element width %u", w);
    if (len < 1)
        return dc_error(DC_ERR_FORMAT, "ctx chunk: empty payload");
    unsigned hb = *p++;
    unsigned K = (hb & 7u) + 1, nt = K - 1, mode = (hb >> 3) & 3u;
    if ((hb & 0xe0u) || mode == 3)
        return dc_error(DC_ERR_FORMAT, "ctx chunk: unknown header bits 0x%02x", hb);
    if ((size_t)(end - p) < nt)
        return dc_error(DC_ERR_FORMAT, "ctx chunk: thresholds truncated");
    unsigned B = kc_nbuckets(w), sh = kc_shift(w), prev = 0;
    h->spec.K = K;
    h->spec.mode = mode;
    for (unsigned j = 0; j < nt; j++) {
        unsigned t = *p++;
        if (t <= prev || t >= B)
            return dc_error(DC_ERR_FORMAT, "ctx chunk: threshold %u out of order or range", t);
        h->spec.thrm[j] = (uint64_t)t << sh;
        prev = t;
    }
    uint64_t total = 0;
    h->spec.off[0] = 0;
    for (unsigned c = 0; c < K; c++) {
        uint64_t v;
        if (dc_ent_get_varint(&p, end, &v) != DC_OK)
            return dc_error(DC_ERR_FORMAT, "ctx chunk: class counts truncated");
        if (v > n || total + v > n)
            return dc_error(DC_ERR_FORMAT, "ctx chunk claims more changes than its %zu elements",
                            n);
        total += v;
        h->spec.off[c + 1] = (size_t)total;
    }
    if (p >= end)
        return dc_error(DC_ERR_FORMAT, "ctx chunk: gaps mask missing");
    unsigned gmask = *p++;
    if (gmask >> K)
        return dc_error(DC_ERR_FORMAT, "ctx chunk: gaps mask 0x%02x names absent classes", gmask);
    h->gmask = gmask;
    for (unsigned c = 0; c < K; c++) {
        if (h->spec.off[c + 1] == h->spec.off[c]) {
            if (gmask & (1u << c))
                return dc_error(DC_ERR_FORMAT, "ctx chunk: gaps named for an empty class");
            continue;
        }
        uint64_t plen;
        if (dc_ent_get_varint(&p, end, &plen) != DC_OK || plen > (uint64_t)(end - p))
            return dc_error(DC_ERR_FORMAT, "ctx chunk: class %u positions past the payload", c);
        h->pofs[c] = (size_t)(p - payload);
        h->plen[c] = (size_t)plen;
        p += plen;
    }
    h->vofs = (size_t)(p - payload);
    h->vlen = (size_t)(end - p);
    h->total = (size_t)total;
    return DC_OK;
}

dc_status_t dc_kern_cuda_ctx_create(size_t max_bytes, dc_kern_cuda_ctx_t **out)
{
    dc_kern_cuda_ctx_t *x = calloc(1, sizeof(*x));
    if (!x || dc_ent_scratch_create(max_bytes ? max_bytes : 1, &x->ent) != DC_OK) {
        free(x);
        return dc_error(DC_ERR_NOMEM, "cuda ctx decoder for %zu-byte chunks", max_bytes);
    }
    x->max_bytes = max_bytes;
    *out = x;
    return DC_OK;
}

void dc_kern_cuda_ctx_free(dc_kern_cuda_ctx_t *x)
{
    if (!x)
        return;
    dc_kern_cuda_free(x->dbuf);
    dc_kern_cuda_free(x->gbuf);
    free(x->escpre);
    dc_ent_scratch_free(x->ent);
    free(x->hbuf);
    free(x);
}

static dc_status_t kc_host(dc_kern_cuda_ctx_t *x, size_t bytes)
{
    if (x->hcap >= bytes)
        return DC_OK;
    uint8_t *b = realloc(x->hbuf, bytes);
    if (!b)
        return dc_error(DC_ERR_NOMEM, "cuda ctx decoder: %zu bytes of host scratch", bytes);
    x->hbuf = b;
    x->hcap = bytes;
    return DC_OK;
}

static dc_status_t kc_dev(dc_kern_cuda_ctx_t *x, size_t bytes)
{
    if (x->dcap >= bytes)
        return DC_OK;
    dc_kern_cuda_free(x->dbuf);
    x->dbuf = NULL;
    x->dcap = 0;
    dc_status_t st = dc_kern_cuda_malloc(&x->dbuf, bytes);
    if (st == DC_OK)
        x->dcap = bytes;
    return st;
}

#define KC_AL(v) (((v) + 15) & ~(size_t)15)

/* the gaps format's limits (ent_gaps.c DC_GAPS_MAX_B, DC_GAPS_E_SHIFT_MAX) */
#define KC_GAPS_MAX_B 16u
#define KC_GAPS_E_SHIFT_MAX 24u

/* (kern_cuda.h) the header and the escapes here with dc_gaps_dec_init's
 * and dc_gaps_dec_finish's checks; the quotients are a DC_ENT_RANS stream
 * of 2-byte words (the CPU's rANS checks on the device) */
dc_status_t dc_kern_cuda_gaps_decode(dc_kern_cuda_ctx_t *x, const uint8_t *src, size_t len,
                                     size_t count, uint64_t n, uint32_t *dpos, uint64_t *sent)
{
    const uint8_t *p = src, *end = src + len;
    uint64_t E, qlen;
    dc_status_t st;
    if (count == 0)
        return len == 0 ? DC_OK : dc_error(DC_ERR_FORMAT, "gaps: bytes without positions");
    if (n > (1ull << 31))
        return dc_error(DC_ERR_INVALID, "gaps on the device: %llu elements (at most 2^31)",
                        (unsigned long long)n);
    if (len < 1)
        return dc_error(DC_ERR_FORMAT, "gaps stream truncated");
    unsigned b = *p++;
    if (b > KC_GAPS_MAX_B)
        return dc_error(DC_ERR_FORMAT, "gaps: %u low bits (at most %u)", b, KC_GAPS_MAX_B);
    if (dc_ent_get_varint(&p, end, &E) != DC_OK || dc_ent_get_varint(&p, end, &qlen) != DC_OK)
        return dc_error(DC_ERR_FORMAT, "gaps stream truncated");
    if (E < 1 || E > 65535 || (E << b) > (1u << KC_GAPS_E_SHIFT_MAX))
        return dc_error(DC_ERR_FORMAT, "gaps: escape %llu with %u low bits out of range",
                        (unsigned long long)E, b);
    if (qlen > (uint64_t)(end - p))
        return dc_error(DC_ERR_FORMAT, "gaps: quotients longer than the stream");
    const uint8_t *q = p, *lo = p + qlen;
    uint64_t lo_len = ((uint64_t)count * b + 7) / 8;
    if (lo_len > (uint64_t)(end - lo))
        return dc_error(DC_ERR_FORMAT, "gaps: low bits truncated");
    unsigned used = (unsigned)((count * b) & 7);
    if (used && (lo[lo_len - 1] >> used) != 0)
        return dc_error(DC_ERR_FORMAT, "gaps: nonzero padding bits");
    /* the escapes: all of the rest, each a varint <= 2^32 - 1, at most one
     * per quotient; their sum below n (else a position would be past it) */
    const uint8_t *e = lo + lo_len;
    size_t nesc = 0;
    uint64_t sum = 0;
    for (;;) {
        if (nesc + 1 > x->esccap) {
            size_t cap = x->esccap ? 2 * x->esccap : 64;
            uint64_t *np = realloc(x->escpre, cap * sizeof(uint64_t));
            if (!np)
                return dc_error(DC_ERR_NOMEM, "gaps escapes: %zu", cap);
            x->escpre = np;
            x->esccap = cap;
        }
        x->escpre[nesc] = sum;
        if (e == end)
            break;
        uint64_t v;
        if (dc_ent_get_varint(&e, end, &v) != DC_OK || v > UINT32_MAX || nesc >= count)
            return dc_error(DC_ERR_FORMAT, "gaps: bad escape");
        sum += v;
        if (sum >= n)
            return dc_error(DC_ERR_FORMAT, "gaps: escapes past the chunk of %llu",
                            (unsigned long long)n);
        nesc++;
    }
    /* device: stream | low bits | quotients | escape prefixes */
    const size_t qofs = 0, lofs = (size_t)qlen, cofs = KC_AL((size_t)(qlen + lo_len)),
                 eofs = KC_AL(cofs + count * 2);
    const size_t need = eofs + (nesc + 1) * sizeof(uint64_t);
    if (x->gcap < need) {
        dc_kern_cuda_free(x->gbuf);
        x->gbuf = NULL;
        x->gcap = 0;
        if ((st = dc_kern_cuda_malloc(&x->gbuf, need)) != DC_OK)
            return st;
        x->gcap = need;
    }
    uint8_t *g = x->gbuf;
    if ((st = dc_kern_cuda_h2d(g + qofs, q, (size_t)(qlen + lo_len))) != DC_OK ||
        (st = dc_kern_cuda_h2d(g + eofs, x->escpre, (nesc + 1) * sizeof(uint64_t))) != DC_OK)
        return st;
    *sent += qlen + lo_len + (nesc + 1) * sizeof(uint64_t);
    st = dc_kern_cuda_values_decode(DC_ENT_RANS, g + qofs, (size_t)qlen, count, 2, g + cofs,
                                    NULL);
    if (st != DC_OK)
        return st;
    return dc_kern_cuda_gaps_positions((const uint16_t *)(void *)(g + cofs), g + lofs,
                                       (size_t)lo_len, b, (unsigned)E,
                                       (const uint64_t *)(void *)(g + eofs), nesc, sum, count, n,
                                       dpos, NULL);
}

dc_status_t dc_kern_cuda_ctx_run(dc_kern_cuda_ctx_t *x, const dc_kern_cuda_ctx_hdr_t *h,
                                 unsigned vm, const uint8_t *payload, void *chunk, size_t n,
                                 unsigned w, int apply, uint32_t *pos_out, void *xor_out,
                                 dc_kern_cuda_ctx_info_t *info)
{
    dc_kern_cuda_ctx_info_t in = {0};
    const size_t total = h->total;
    const unsigned K = h->spec.K;
    dc_status_t st;
    if (n * w > x->max_bytes)
        return dc_error(DC_ERR_FORMAT, "ctx chunk of %zu x %u bytes out of range", n, w);
    if (vm >= DC_ENT_GOLOMB)
        return dc_error(DC_ERR_FORMAT, "ctx chunk: values method %u", vm);
    if (total == 0) {
        /* no words: the values stream is checked on the host (it is empty
         * or refused), nothing is applied */
        if ((st = kc_host(x, 16)) != DC_OK)
            return st;
        st = dc_ent_val_decode(x->ent, vm, payload + h->vofs, h->vlen, 0, w, x->hbuf);
        if (info)
            *info = in;
        return st;
    }
    /* the Golomb class streams and (unless zstd) the values stream cross as
     * one span of the payload when nothing between them is decoded on the
     * host; else piece by piece */
    const int host_values = vm == DC_ENT_ZSTD;
    size_t s0 = h->vofs, s1 = host_values ? h->vofs : h->vofs + h->vlen;
    for (unsigned c = 0; c < K; c++)
        if (h->plen[c] && !(h->gmask & (1u << c)) && h->pofs[c] < s0)
            s0 = h->pofs[c];
    int span = !h->gmask && !host_values;
    size_t sbytes = span ? s1 - s0 : 0;
    if (!span) {
        for (unsigned c = 0; c < K; c++)
            if (h->plen[c] && !(h->gmask & (1u << c)))
                sbytes += KC_AL(h->plen[c]);
        if (!host_values)
            sbytes += h->vlen;
    }
    const size_t rofs = 0, wofs = KC_AL(total * sizeof(uint32_t)),
                 sofs = wofs + KC_AL(total * w);
    if ((st = kc_dev(x, sofs + sbytes + 16)) != DC_OK)
        return st;
    uint8_t *d = x->dbuf;
    uint32_t *dranks = (uint32_t *)(void *)(d + rofs);
    /* where each Golomb class stream and the values stream lie on the device */
    size_t dpos[DC_KERN_CUDA_CTX_MAX_CLASSES] = {0}, dval = 0;
    if (span) {
        if ((st = dc_kern_cuda_h2d(d + sofs, payload + s0, s1 - s0)) != DC_OK)
            return st;
        in.h2d_bytes += s1 - s0;
        for (unsigned c = 0; c < K; c++)
            dpos[c] = sofs + (h->pofs[c] - s0);
        dval = sofs + (h->vofs - s0);
    } else {
        size_t at = sofs;
        for (unsigned c = 0; c < K; c++) {
            if (!h->plen[c] || (h->gmask & (1u << c)))
                continue;
            if ((st = dc_kern_cuda_h2d(d + at, payload + h->pofs[c], h->plen[c])) != DC_OK)
                return st;
            in.h2d_bytes += h->plen[c];
            dpos[c] = at;
            at += KC_AL(h->plen[c]);
        }
        if (!host_values && h->vlen) {
            if ((st = dc_kern_cuda_h2d(d + at, payload + h->vofs, h->vlen)) != DC_OK)
                return st;
            in.h2d_bytes += h->vlen;
        }
        dval = at;
    }
    /* class ranks: the Golomb classes in one launch (a thread each), the
     * gaps classes one after another */
    {
        const void *gsrc[DC_KERN_CUDA_CTX_MAX_CLASSES];
        size_t glen[DC_KERN_CUDA_CTX_MAX_CLASSES], gcnt[DC_KERN_CUDA_CTX_MAX_CLASSES];
        uint32_t *gpos[DC_KERN_CUDA_CTX_MAX_CLASSES];
        unsigned ng = 0;
        for (unsigned c = 0; c < K; c++) {
            size_t cnt = h->spec.off[c + 1] - h->spec.off[c];
            if (!cnt || (h->gmask & (1u << c)))
                continue;
            gsrc[ng] = d + dpos[c];
            glen[ng] = h->plen[c];
            gcnt[ng] = cnt;
            gpos[ng] = dranks + h->spec.off[c];
            ng++;
        }
        if (ng && (st = dc_kern_cuda_golomb_decode_multi(ng, gsrc, glen, gcnt, n, gpos, NULL)) !=
                      DC_OK)
            return st;
        in.dev_classes += ng;
    }
    for (unsigned c = 0; c < K; c++) {
        size_t cnt = h->spec.off[c + 1] - h->spec.off[c];
        if (!cnt || !(h->gmask & (1u << c)))
            continue;
        if (n <= (1ull << 31)) {
            if ((st = dc_kern_cuda_gaps_decode(x, payload + h->pofs[c], h->plen[c], cnt, n,
                              dranks + h->spec.off[c], &in.h2d_bytes)) != DC_OK)
                return st;
            in.dev_classes++;
            in.dev_gaps_classes++;
        } else {
            if ((st = kc_host(x, cnt * sizeof(uint32_t))) != DC_OK)
                return st;
            st = dc_ent_gaps_decode(x->ent, payload + h->pofs[c], h->plen[c], cnt, n,
                                    (uint32_t *)(void *)x->hbuf);
            if (st != DC_OK)
                return st;
            if ((st = dc_kern_cuda_h2d(dranks + h->spec.off[c], x->hbuf,
                                       cnt * sizeof(uint32_t))) != DC_OK)
                return st;
            in.h2d_bytes += cnt * sizeof(uint32_t);
            in.host_classes++;
        }
    }
    /* values */
    if (host_values) {
        if ((st = kc_host(x, total * w)) != DC_OK)
            return st;
        st = dc_ent_val_decode(x->ent, vm, payload + h->vofs, h->vlen, total, w, x->hbuf);
        if (st != DC_OK)
            return st;
        if ((st = dc_kern_cuda_h2d(d + wofs, x->hbuf, total * w)) != DC_OK)
            return st;
        in.h2d_bytes += total * w;
        in.host_values = 1;
    } else {
        st = dc_kern_cuda_values_decode(vm, d + dval, h->vlen, total, w, d + wofs, NULL);
        if (st != DC_OK)
            return st;
    }
    st = dc_kern_cuda_ctx_apply(chunk, n, w, &h->spec, dranks, d + wofs, pos_out, xor_out, apply,
                                NULL);
    if (info)
        *info = in;
    return st;
}
