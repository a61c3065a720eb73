/* listpack.c - a device sender's rank lists, packed: the CPU reference and
 * the unpacker (listpack.h). */
#include "kernels/listpack.h"

#include "kernels/entropy.h"

#include <stdlib.h>
#include <string.h>

/* One varint from src (units: its bytes, or with nibbles its nibbles) at
 * unit *u: 1 with *v, 0 when the units end first, -1 past 32 bits. */
static int lp_get(const uint8_t *src, size_t units, size_t *u, int nibbles, uint64_t *v)
{
    const unsigned bits = nibbles ? 3 : 7, cont = nibbles ? 8 : 0x80;
    unsigned sh = 0;
    *v = 0;
    for (;;) {
        if (*u == units)
            return 0;
        unsigned b = nibbles ? (src[*u / 2] >> (4 * (*u % 2))) & 15u : src[*u];
        (*u)++;
        if (sh >= 32)
            return -1;
        *v |= (uint64_t)(b & (cont - 1)) << sh;
        if (!(b & cont))
            return *v > UINT32_MAX ? -1 : 1;
        sh += bits;
    }
}

dc_status_t dc_listpack(const uint8_t *cls, const uint32_t *rnk, size_t count, unsigned K,
                        int nibbles, uint8_t *out, size_t cap, size_t *len, uint64_t *ccnt)
{
    if (K < 1 || K > 8 || (!cls && K != 1))
        return dc_error(DC_ERR_INVALID, "listpack: %u classes%s", K,
                        cls ? "" : " without a class list");
    if (cap < dc_listpack_bound(count))
        return dc_error(DC_ERR_INVALID, "listpack: capacity %zu for %zu ranks", cap, count);
    for (unsigned c = 0; c < K; c++)
        ccnt[c] = 0;
    for (size_t k = 0; k < count; k++) {
        unsigned c = cls ? cls[k] : 0;
        if (c >= K)
            return dc_error(DC_ERR_INVALID, "listpack: change %zu in class %u of %u", k, c, K);
        ccnt[c]++;
    }
    uint32_t *gaps = malloc((count ? count : 1) * sizeof(*gaps));
    if (!gaps)
        return dc_error(DC_ERR_NOMEM, "listpack: %zu gaps", count);
    size_t o = 0;
    for (unsigned c = 0; c < K; c++) {
        uint32_t prev = 0;
        int first = 1;
        for (size_t k = 0; k < count; k++) {
            if ((cls ? cls[k] : 0) != c)
                continue;
            gaps[o++] = first ? rnk[k] : rnk[k] - prev - 1u;
            prev = rnk[k];
            first = 0;
        }
    }
    dc_status_t st = dc_listpack_words(gaps, count, 4, nibbles, out, cap, len);
    free(gaps);
    return st;
}

dc_status_t dc_listunpack(const uint8_t *src, size_t len, const uint64_t *ccnt, unsigned K,
                          int nibbles, uint32_t *idx, size_t count)
{
    uint64_t sum = 0;
    if (K < 1 || K > 8)
        return dc_error(DC_ERR_INVALID, "listunpack: %u classes", K);
    for (unsigned c = 0; c < K; c++) {
        if (ccnt[c] > count - sum)
            return dc_error(DC_ERR_FORMAT, "listunpack: class counts past %zu ranks", count);
        sum += ccnt[c];
    }
    if (sum != count)
        return dc_error(DC_ERR_FORMAT, "listunpack: class counts sum to %llu, not %zu",
                        (unsigned long long)sum, count);
    dc_status_t st = dc_listunpack_words(src, len, count, 4, nibbles, idx);
    if (st != DC_OK)
        return st;
    /* gaps to ranks, class by class */
    size_t o = 0;
    for (unsigned c = 0; c < K; c++) {
        uint64_t at = 0;
        for (uint64_t j = 0; j < ccnt[c]; j++, o++) {
            at = j == 0 ? idx[o] : at + idx[o] + 1;
            if (at > UINT32_MAX)
                return dc_error(DC_ERR_FORMAT, "listunpack: rank past 2^32 - 1 in class %u", c);
            idx[o] = (uint32_t)at;
        }
    }
    return DC_OK;
}

dc_status_t dc_listunpack_counts(const uint8_t *src, size_t len, size_t count, uint32_t *cnt,
                                 size_t *nsym)
{
    uint64_t sum = 0;
    size_t m = 0, u = 0;
    while (u < len) {
        uint64_t v;
        int r = lp_get(src, len, &u, 0, &v);
        if (r == 0)
            return dc_error(DC_ERR_FORMAT, "listunpack: count %zu truncated", m);
        if (r < 0)
            return dc_error(DC_ERR_FORMAT, "listunpack: count %zu past 32 bits", m);
        if (m == count || v + 1 > count - sum)
            return dc_error(DC_ERR_FORMAT, "listunpack: counts past %zu words", count);
        cnt[m++] = (uint32_t)(v + 1);
        sum += v + 1;
    }
    if (sum != count)
        return dc_error(DC_ERR_FORMAT, "listunpack: counts sum to %llu, not %zu",
                        (unsigned long long)sum, count);
    *nsym = m;
    return DC_OK;
}

dc_status_t dc_listpack_words(const void *words, size_t count, unsigned w, int nibbles,
                              uint8_t *out, size_t cap, size_t *len)
{
    const uint8_t *v = words;
    if (w != 1 && w != 2 && w != 4)
        return dc_error(DC_ERR_INVALID, "listpack: %u-byte words", w);
    if (cap < dc_listpack_bound(count))
        return dc_error(DC_ERR_INVALID, "listpack: capacity %zu for %zu words", cap, count);
    size_t o = 0;
    if (nibbles) {
        size_t nibs = 0;
        for (size_t k = 0; k < count; k++) {
            uint32_t x = 0;
            memcpy(&x, v + k * w, w);
            do {
                nibs++;
                x >>= 3;
            } while (x);
        }
        if ((nibs + 1) / 2 > cap)
            return dc_error(DC_ERR_INVALID, "listpack: %zu nibbles past capacity %zu", nibs,
                            cap);
        memset(out, 0, (nibs + 1) / 2);
    }
    for (size_t k = 0; k < count; k++) {
        uint32_t x = 0;
        memcpy(&x, v + k * w, w); /* little-endian */
        if (!nibbles) {
            o += dc_ent_put_varint(out + o, x);
            continue;
        }
        for (;;) {
            unsigned nib = (x & 7u) | (x >= 8u ? 8u : 0u);
            out[o / 2] |= (uint8_t)(nib << (4 * (o % 2)));
            o++;
            if (x < 8u)
                break;
            x >>= 3;
        }
    }
    *len = nibbles ? (o + 1) / 2 : o;
    return DC_OK;
}

dc_status_t dc_listunpack_words(const uint8_t *src, size_t len, size_t count, unsigned w,
                                int nibbles, void *out)
{
    uint8_t *o = out;
    if (w != 1 && w != 2 && w != 4)
        return dc_error(DC_ERR_INVALID, "listunpack: %u-byte words", w);
    const uint64_t lim = w == 4 ? UINT32_MAX : (1ull << (8 * w)) - 1;
    /* in units: bytes (7 bits each) or nibbles (3 bits each) */
    const size_t units = nibbles ? 2 * len : len;
    size_t u = 0;
    for (size_t k = 0; k < count; k++) {
        uint64_t v;
        int r = lp_get(src, units, &u, nibbles, &v);
        if (r == 0)
            return dc_error(DC_ERR_FORMAT, "listunpack: word %zu truncated", k);
        if (r < 0)
            return dc_error(DC_ERR_FORMAT, "listunpack: word %zu past 32 bits", k);
        if (v > lim)
            return dc_error(DC_ERR_FORMAT, "listunpack: word %zu does not fit %u bytes", k, w);
        uint32_t x = (uint32_t)v;
        memcpy(o + k * w, &x, w); /* little-endian */
    }
    /* nothing left: at most the zero nibble that fills the last byte */
    if (units - u > (nibbles ? 1u : 0u) || (u < units && (src[u / 2] >> 4) != 0))
        return dc_error(DC_ERR_FORMAT, "listunpack: %zu bytes left over",
                        nibbles ? (units - u) / 2 : units - u);
    return DC_OK;
}
