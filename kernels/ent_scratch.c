/* ent_scratch.c - the entropy coders' scratch, method names and varints. */
#include "kernels/entropy_internal.h"

#include <stdlib.h>

unsigned dc_ent_rans_ways = 0;

const char *dc_ent_method_name(unsigned method)
{
    static const char *const names[] = {"raw", "zstd", "rans", "planes", "golomb", "gaps"};
    return method < DC_ENT_METHOD_COUNT ? names[method] : "?";
}

dc_status_t dc_ent_scratch_create(size_t max_count, dc_ent_scratch_t **out)
{
    dc_ent_scratch_t *s = calloc(1, sizeof(*s));
    if (!s)
        return dc_error(DC_ERR_NOMEM, "entropy scratch");
    s->max_count = max_count;
    s->max_ways = 32;
    s->tmp_cap = dc_ent_val_bound(max_count, 1);
    s->hcap = 16;
    while (s->hcap < max_count / 2) /* words of >= 4 bytes: load <= 50% */
        s->hcap <<= 1;
    s->hist = calloc(65536, sizeof(uint32_t));
    s->qfreq = calloc(65536, sizeof(uint32_t));
    s->cum = calloc(65537, sizeof(uint32_t));
    s->dtab[0] = malloc(65536 * sizeof(uint64_t));
    s->dtab[1] = malloc(65536 * sizeof(uint64_t));
    s->syms = calloc(65536, sizeof(uint16_t));
    s->esym = calloc(65536, sizeof(*s->esym));
    for (unsigned j = 0; j < 2; j++) {
        s->ftab[j] = calloc(65536, sizeof(uint32_t));
        s->stab[j] = calloc(65536 + 16, sizeof(uint16_t));
    }
    s->tmp[0] = malloc(s->tmp_cap);
    s->tmp[1] = malloc(s->tmp_cap);
    s->hkeys = malloc(s->hcap * sizeof(uint64_t));
    s->hcnt = calloc(s->hcap, sizeof(uint32_t));
    if (!s->hist || !s->qfreq || !s->cum || !s->dtab[0] || !s->dtab[1] || !s->syms ||
        !s->esym || !s->tmp[0] || !s->tmp[1] || !s->hkeys || !s->hcnt ||
        !s->ftab[0] || !s->ftab[1] || !s->stab[0] || !s->stab[1]) {
        dc_ent_scratch_free(s);
        return dc_error(DC_ERR_NOMEM, "entropy scratch for %zu words", max_count);
    }
    *out = s;
    return DC_OK;
}

void dc_ent_scratch_set_max_ways(dc_ent_scratch_t *s, unsigned ways)
{
    s->max_ways = ways >= 32 ? 32 : 4;
}

void dc_ent_scratch_free(dc_ent_scratch_t *s)
{
    if (!s)
        return;
    free(s->hist);
    free(s->qfreq);
    free(s->cum);
    free(s->dtab[0]);
    free(s->dtab[1]);
    free(s->syms);
    free(s->esym);
    for (unsigned j = 0; j < 2; j++) {
        free(s->ftab[j]);
        free(s->stab[j]);
    }
    free(s->gsym);
    free(s->tmp[0]);
    free(s->tmp[1]);
    free(s->hkeys);
    free(s->hcnt);
    free(s);
}

/* --- varints -------------------------------------------------------------- */

size_t dc_ent_put_varint(uint8_t *dst, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        dst[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    dst[n++] = (uint8_t)v;
    return n;
}

dc_status_t dc_ent_get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    const uint8_t *q = *p;
    for (unsigned i = 0; i < 10; i++) {
        if (q >= end)
            return dc_error(DC_ERR_FORMAT, "truncated varint");
        uint8_t b = *q++;
        if (i == 9 && b > 1)
            return dc_error(DC_ERR_FORMAT, "varint overflows 64 bits");
        r |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *p = q;
            *v = r;
            return DC_OK;
        }
    }
    return dc_error(DC_ERR_FORMAT, "varint longer than 10 bytes");
}

/* A stream written at at + 5 (len bytes) gets its varint length in front:
 * the length goes at `at` and the stream moves up to follow it; returns
 * the bytes both take. */
size_t dc_ent_prefix_len(uint8_t *at, size_t len)
{
    uint8_t vb[10];
    size_t vl = dc_ent_put_varint(vb, len);
    memmove(at + vl, at + 5, len);
    memcpy(at, vb, vl);
    return vl + len;
}
