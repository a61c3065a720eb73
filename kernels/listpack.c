/* listpack.c - a device sender's rank lists, packed: the CPU reference and
 * the unpacker (listpack.h). */
#include "kernels/listpack.h"

#include <string.h>

static size_t lp_put(uint8_t *dst, uint32_t v)
{
    size_t i = 0;
    while (v >= 0x80) {
        dst[i++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    dst[i++] = (uint8_t)v;
    return i;
}

dc_status_t dc_listpack(const uint8_t *cls, const uint32_t *rnk, size_t count, unsigned K,
                        uint8_t *out, size_t cap, size_t *len, uint64_t *ccnt)
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
    size_t o = 0;
    for (unsigned c = 0; c < K; c++) {
        uint32_t prev = 0;
        int first = 1;
        for (size_t k = 0; k < count; k++) {
            if ((cls ? cls[k] : 0) != c)
                continue;
            o += lp_put(out + o, first ? rnk[k] : rnk[k] - prev - 1u);
            prev = rnk[k];
            first = 0;
        }
    }
    *len = o;
    return DC_OK;
}

dc_status_t dc_listunpack(const uint8_t *src, size_t len, const uint64_t *ccnt, unsigned K,
                          uint32_t *idx, size_t count)
{
    const uint8_t *p = src, *end = src + len;
    size_t o = 0;
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
    for (unsigned c = 0; c < K; c++) {
        uint64_t at = 0;
        for (uint64_t j = 0; j < ccnt[c]; j++) {
            uint64_t v = 0;
            unsigned sh = 0;
            for (;;) {
                if (p == end)
                    return dc_error(DC_ERR_FORMAT, "listunpack: truncated in class %u", c);
                uint8_t b = *p++;
                if (sh == 28 && b > 0x0f)
                    return dc_error(DC_ERR_FORMAT, "listunpack: gap past 32 bits in class %u",
                                    c);
                v |= (uint64_t)(b & 0x7f) << sh;
                if (!(b & 0x80))
                    break;
                sh += 7;
            }
            at = j == 0 ? v : at + v + 1;
            if (at > UINT32_MAX)
                return dc_error(DC_ERR_FORMAT, "listunpack: rank past 2^32 - 1 in class %u", c);
            idx[o++] = (uint32_t)at;
        }
    }
    if (p != end)
        return dc_error(DC_ERR_FORMAT, "listunpack: %zu bytes left over", (size_t)(end - p));
    return DC_OK;
}

dc_status_t dc_listunpack_counts(const uint8_t *src, size_t len, size_t count, uint32_t *cnt,
                                 size_t *nsym)
{
    const uint8_t *p = src, *end = src + len;
    uint64_t sum = 0;
    size_t m = 0;
    while (p < end) {
        uint64_t v = 0;
        unsigned sh = 0;
        for (;;) {
            if (p == end)
                return dc_error(DC_ERR_FORMAT, "listunpack: count %zu truncated", m);
            uint8_t b = *p++;
            if (sh == 28 && b > 0x0f)
                return dc_error(DC_ERR_FORMAT, "listunpack: count %zu past 32 bits", m);
            v |= (uint64_t)(b & 0x7f) << sh;
            if (!(b & 0x80))
                break;
            sh += 7;
        }
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

dc_status_t dc_listpack_words(const void *words, size_t count, unsigned w, uint8_t *out,
                              size_t cap, size_t *len)
{
    const uint8_t *v = words;
    if (w != 1 && w != 2 && w != 4)
        return dc_error(DC_ERR_INVALID, "listpack: %u-byte words", w);
    if (cap < dc_listpack_bound(count))
        return dc_error(DC_ERR_INVALID, "listpack: capacity %zu for %zu words", cap, count);
    size_t o = 0;
    for (size_t k = 0; k < count; k++) {
        uint32_t x = 0;
        memcpy(&x, v + k * w, w); /* little-endian */
        o += lp_put(out + o, x);
    }
    *len = o;
    return DC_OK;
}

dc_status_t dc_listunpack_words(const uint8_t *src, size_t len, size_t count, unsigned w,
                                void *out)
{
    const uint8_t *p = src, *end = src + len;
    uint8_t *o = out;
    if (w != 1 && w != 2 && w != 4)
        return dc_error(DC_ERR_INVALID, "listunpack: %u-byte words", w);
    const uint64_t lim = w == 4 ? UINT32_MAX : (1ull << (8 * w)) - 1;
    for (size_t k = 0; k < count; k++) {
        uint64_t v = 0;
        unsigned sh = 0;
        for (;;) {
            if (p == end)
                return dc_error(DC_ERR_FORMAT, "listunpack: word %zu truncated", k);
            uint8_t b = *p++;
            if (sh == 28 && b > 0x0f)
                return dc_error(DC_ERR_FORMAT, "listunpack: word %zu past 32 bits", k);
            v |= (uint64_t)(b & 0x7f) << sh;
            if (!(b & 0x80))
                break;
            sh += 7;
        }
        if (v > lim)
            return dc_error(DC_ERR_FORMAT, "listunpack: word %zu does not fit %u bytes", k, w);
        uint32_t x = (uint32_t)v;
        memcpy(o + k * w, &x, w); /* little-endian */
    }
    if (p != end)
        return dc_error(DC_ERR_FORMAT, "listunpack: %zu bytes left over", (size_t)(end - p));
    return DC_OK;
}
