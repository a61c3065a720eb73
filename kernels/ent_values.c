/* ent_values.c - values streams (entropy.h): raw, zstd, rANS or byte
 * planes, whichever is smallest; the order-0 entropy figure. */
#include "kernels/entropy_internal.h"

#include <math.h>
#include <zstd.h>

/* count * H(histogram) in bits. */
static double dc_hist_entropy_bits(const dc_ent_scratch_t *s, size_t nsym, size_t count)
{
    double bits = 0.0;
    for (size_t k = 0; k < nsym; k++) {
        double h = s->hist[s->syms[k]];
        bits -= h * log2(h / (double)count);
    }
    return bits;
}

double dc_ent_counts_entropy_bits(const uint32_t *cnt, size_t nsym, size_t count)
{
    /* dc_hist_entropy_bits's sum, term for term */
    double bits = 0.0;
    for (size_t k = 0; k < nsym; k++) {
        double h = cnt[k];
        bits -= h * log2(h / (double)count);
    }
    return bits;
}

/* --- values ---------------------------------------------------------------- */

size_t dc_ent_val_bound(size_t count, unsigned w)
{
    size_t raw = count * w;
    size_t z = ZSTD_compressBound(raw);
    return DC_MAX(raw, z) + 64;
}

double dc_ent_words_entropy_bits(dc_ent_scratch_t *s, const void *vals, size_t count,
                                 unsigned w)
{
    if (count == 0)
        return 0.0;
    const uint8_t *v = vals;
    double bits = 0.0;
    if (w <= 2) {
        size_t nsym = dc_hist_build(s, v, count, w, 8 * w);
        bits = dc_hist_entropy_bits(s, nsym, count);
        dc_hist_clear(s, nsym);
        return bits;
    }
    if (count * w > s->max_count)
        return 0.0;
    size_t mask = s->hcap - 1;
    for (size_t i = 0; i < count; i++) {
        uint64_t key = w == 4 ? dc_load_le32(v + 4 * i) : dc_load_le64(v + 8 * i);
        size_t hsh = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
        while (s->hcnt[hsh] && s->hkeys[hsh] != key)
            hsh = (hsh + 1) & mask;
        s->hkeys[hsh] = key;
        s->hcnt[hsh]++;
    }
    for (size_t i = 0; i < s->hcap; i++) {
        if (s->hcnt[i]) {
            double h = s->hcnt[i];
            bits -= h * log2(h / (double)count);
            s->hcnt[i] = 0;
        }
    }
    return bits;
}

static dc_status_t dc_planes_encode(dc_ent_scratch_t *s, const uint8_t *v, size_t count,
                                    unsigned w, uint8_t *dst, size_t cap, size_t *out_len,
                                    dc_ent_isa_t isa)
{
    size_t h = 0;
    for (unsigned j = 0; j < w; j++) {
        if (cap - h < 16)
            return DC_ERR_BUSY;
        /* reserve 5 bytes for the varint, then move */
        size_t len;
        dc_status_t st =
            dc_rans_encode(s, v + j, count, w, 8, dst + h + 5, cap - h - 5, &len, isa);
        if (st != DC_OK)
            return st;
        h += dc_ent_prefix_len(dst + h, len);
    }
    *out_len = h;
    return DC_OK;
}

int dc_ent_val_force = -1;

/* The forced method (dc_ent_val_force) into dst: DC_OK, or DC_ERR_BUSY when
 * it does not apply (the caller then picks the smallest). */
static dc_status_t dc_val_encode_forced(dc_ent_scratch_t *s, const uint8_t *v, size_t count,
                                        unsigned w, int allow_zstd, uint8_t *dst, size_t cap,
                                        size_t *out_len, unsigned *method)
{
    const int m = dc_ent_val_force;
    size_t raw = count * w, len = 0;
    dc_status_t st = DC_ERR_BUSY;
    if (m == DC_ENT_RAW) {
        memcpy(dst, v, raw);
        len = raw;
        st = DC_OK;
    } else if (m == DC_ENT_ZSTD && allow_zstd) {
        size_t z = ZSTD_compress(dst, cap, v, raw, 1);
        if (!ZSTD_isError(z)) {
            len = z;
            st = DC_OK;
        }
    } else if (m == DC_ENT_RANS && w <= 2) {
        st = dc_rans_encode(s, v, count, w, 8 * w, dst, cap, &len, dc_ent_isa());
    } else if (m == DC_ENT_PLANES && w >= 2) {
        st = dc_planes_encode(s, v, count, w, dst, cap, &len, dc_ent_isa());
    }
    if (st != DC_OK)
        return DC_ERR_BUSY;
    *out_len = len;
    *method = (unsigned)m;
    return DC_OK;
}

dc_status_t dc_ent_val_encode(dc_ent_scratch_t *s, const void *vals, size_t count, unsigned w,
                              int allow_zstd, uint8_t *dst, size_t cap, size_t *out_len,
                              unsigned *method)
{
    return dc_ent_val_encode_h(s, vals, count, w, allow_zstd, dst, cap, out_len, method, NULL);
}

dc_status_t dc_ent_val_encode_h(dc_ent_scratch_t *s, const void *vals, size_t count, unsigned w,
                                int allow_zstd, uint8_t *dst, size_t cap, size_t *out_len,
                                unsigned *method, double *h_bits)
{
    size_t raw = count * w;
    if (cap < dc_ent_val_bound(count, w) || count * w > s->max_count)
        return dc_error(DC_ERR_BUSY, "values: output buffer too small");
    const uint8_t *v = vals;
    size_t best = raw;
    unsigned bm = DC_ENT_RAW;
    int bi = -1; /* which tmp holds the best; -1 = raw */
    int free_tmp = 0;
    size_t len;
    if (count == 0) {
        *out_len = 0;
        *method = DC_ENT_RAW;
        if (h_bits)
            *h_bits = 0.0;
        return DC_OK;
    }
    if (dc_ent_val_force >= 0 &&
        dc_val_encode_forced(s, v, count, w, allow_zstd, dst, cap, out_len, method) == DC_OK) {
        if (h_bits)
            *h_bits = dc_ent_words_entropy_bits(s, v, count, w);
        return DC_OK;
    }
    const dc_ent_isa_t isa = dc_ent_isa();
    if (w <= 2) {
        /* one histogram for the entropy figure and the rANS table */
        size_t nsym = dc_hist_build(s, v, count, w, 8 * w);
        if (h_bits)
            *h_bits = dc_hist_entropy_bits(s, nsym, count);
        dc_status_t st = dc_rans_encode_hist(s, v, count, w, 8 * w, nsym, s->tmp[free_tmp],
                                             s->tmp_cap, &len, isa);
        dc_hist_clear(s, nsym);
        if (st == DC_OK && len < best) {
            best = len;
            bm = DC_ENT_RANS;
            bi = free_tmp;
            free_tmp ^= 1;
        }
    } else if (h_bits) {
        *h_bits = dc_ent_words_entropy_bits(s, v, count, w);
    }
    if (w >= 2 && (w > 2 || bm == DC_ENT_RAW)) {
        if (dc_planes_encode(s, v, count, w, s->tmp[free_tmp], s->tmp_cap, &len, isa) == DC_OK &&
            len < best) {
            best = len;
            bm = DC_ENT_PLANES;
            bi = free_tmp;
            free_tmp ^= 1;
        }
    }
    /* zstd level 1 only where it can plausibly beat the order-0 coder:
     * streams that order-0 coding leaves above a quarter of their raw size
     * (dense values, wide words).  Sparse BF16 XOR words code to ~0.2x raw
     * with rANS and zstd never wins there; skipping it saves encode time. */
    if (allow_zstd && (best > raw / 4 || w >= 4)) {
        size_t z = ZSTD_compress(s->tmp[free_tmp], s->tmp_cap, v, raw, 1);
        if (!ZSTD_isError(z) && z < best) {
            best = z;
            bm = DC_ENT_ZSTD;
            bi = free_tmp;
        }
    }
    memcpy(dst, bi < 0 ? v : s->tmp[bi], best);
    *out_len = best;
    *method = bm;
    return DC_OK;
}

dc_status_t dc_ent_val_decode(dc_ent_scratch_t *s, unsigned method, const uint8_t *src,
                              size_t len, size_t count, unsigned w, void *vals)
{
    size_t raw = count * w;
    uint8_t *out = vals;
    switch (method) {
    case DC_ENT_RAW:
        if (len != raw)
            return dc_error(DC_ERR_FORMAT, "raw values: %zu bytes, expected %zu", len, raw);
        memcpy(out, src, raw);
        return DC_OK;
    case DC_ENT_ZSTD: {
        unsigned long long fs = ZSTD_getFrameContentSize(src, len);
        if (fs != raw)
            return dc_error(DC_ERR_FORMAT, "zstd values: content size does not match %zu", raw);
        size_t z = ZSTD_decompress(out, raw, src, len);
        if (ZSTD_isError(z) || z != raw)
            return dc_error(DC_ERR_FORMAT, "zstd values: %s",
                            ZSTD_isError(z) ? ZSTD_getErrorName(z) : "short output");
        return DC_OK;
    }
    case DC_ENT_RANS:
        if (w > 2)
            return dc_error(DC_ERR_FORMAT, "rANS values need 1- or 2-byte words");
        if (count == 0)
            return len == 0 ? DC_OK : dc_error(DC_ERR_FORMAT, "rANS values: trailing bytes");
        return dc_rans_decode(s, src, len, count, 8 * w, out, w);
    case DC_ENT_PLANES: {
        const uint8_t *p = src, *end = src + len;
        for (unsigned j = 0; j < w; j++) {
            uint64_t l;
            if (dc_ent_get_varint(&p, end, &l) != DC_OK || l > (uint64_t)(end - p))
                return dc_error(DC_ERR_FORMAT, "plane %u: bad length", j);
            dc_status_t st = dc_rans_decode(s, p, (size_t)l, count, 8, out + j, w);
            if (st != DC_OK)
                return st;
            p += l;
        }
        if (p != end)
            return dc_error(DC_ERR_FORMAT, "planes: trailing bytes");
        return DC_OK;
    }
    default:
        return dc_error(DC_ERR_FORMAT, "unknown values method %u", method);
    }
}
