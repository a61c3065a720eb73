/* layout.c - chunk plan and placement maps (see layout.h). */
#include "engine/layout.h"
#include "kernels/kern_cuda.h"

#include <stdlib.h>
#include <xxhash.h>

dc_status_t dc_layout_from_list(const dc_layout_desc_t *d, size_t n, uint64_t chunk_size,
                                dc_layout_t **out)
{
    if (chunk_size < 8 || chunk_size > (256ull << 20))
        return dc_error(DC_ERR_INVALID, "layout: chunk size %llu outside 8 B .. 256 MiB",
                        (unsigned long long)chunk_size);
    if (n > UINT32_MAX)
        return dc_error(DC_ERR_INVALID, "layout: too many tensors");
    dc_layout_t *l = calloc(1, sizeof(*l));
    if (!l)
        return dc_error(DC_ERR_NOMEM, "layout: out of memory");
    l->chunk_size = chunk_size;
    l->ntensors = (uint32_t)n;
    l->tensors = calloc(n ? n : 1, sizeof(*l->tensors));
    dc_status_t st = DC_OK;
    if (!l->tensors) {
        st = dc_error(DC_ERR_NOMEM, "layout: out of memory");
        goto fail;
    }
    XXH3_state_t *hs = XXH3_createState();
    if (!hs) {
        st = dc_error(DC_ERR_NOMEM, "layout: out of memory");
        goto fail;
    }
    XXH3_64bits_reset(hs);
    XXH3_64bits_update(hs, &chunk_size, sizeof(chunk_size));
    uint64_t nch = 0;
    for (size_t i = 0; i < n; i++) {
        dc_layout_tensor_t *t = &l->tensors[i];
        t->name = strdup(d[i].name ? d[i].name : "");
        t->dtype = d[i].dtype;
        t->esize = (uint32_t)dc_dtype_size(d[i].dtype);
        t->nelems = d[i].nelems;
        if (!t->name || t->esize == 0 || !dc_mul_u64(t->nelems, t->esize, &t->nbytes)) {
            XXH3_freeState(hs);
            st = dc_error(DC_ERR_INVALID, "layout: tensor '%s' has a bad dtype or size",
                          d[i].name ? d[i].name : "");
            goto fail;
        }
        uint64_t csz = chunk_size - chunk_size % t->esize;
        uint64_t tc = (t->nbytes + csz - 1) / csz;
        t->first_chunk = (uint32_t)nch;
        t->nchunks = (uint32_t)tc;
        nch += tc;
        l->total_bytes += t->nbytes;
        XXH3_64bits_update(hs, t->name, strlen(t->name) + 1);
        uint32_t dt = (uint32_t)t->dtype;
        XXH3_64bits_update(hs, &dt, sizeof(dt));
        XXH3_64bits_update(hs, &t->nelems, sizeof(t->nelems));
        if (nch > (1u << 26)) {
            XXH3_freeState(hs);
            st = dc_error(DC_ERR_INVALID, "layout: more than 2^26 chunks; raise chunk_size");
            goto fail;
        }
    }
    l->id = XXH3_64bits_digest(hs);
    XXH3_freeState(hs);
    l->nchunks = (uint32_t)nch;
    l->chunks = calloc(nch ? nch : 1, sizeof(*l->chunks));
    if (!l->chunks) {
        st = dc_error(DC_ERR_NOMEM, "layout: out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < l->ntensors; i++) {
        dc_layout_tensor_t *t = &l->tensors[i];
        uint64_t csz = chunk_size - chunk_size % t->esize;
        for (uint32_t k = 0; k < t->nchunks; k++) {
            dc_layout_chunk_t *c = &l->chunks[t->first_chunk + k];
            c->tensor = i;
            c->index = k;
            c->offset = (uint64_t)k * csz;
            c->len = DC_MIN(csz, t->nbytes - c->offset);
            if (c->len > l->max_chunk)
                l->max_chunk = c->len;
        }
    }
    *out = l;
    return DC_OK;

fail:
    dc_layout_free(l);
    return st;
}

dc_status_t dc_layout_from_st(const dc_st_file_t *f, uint64_t chunk_size, dc_layout_t **out)
{
    size_t n = dc_st_count(f);
    dc_layout_desc_t *d = calloc(n ? n : 1, sizeof(*d));
    if (!d)
        return dc_error(DC_ERR_NOMEM, "layout: out of memory");
    for (size_t i = 0; i < n; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(f, i);
        d[i].name = t->name;
        d[i].dtype = t->dtype;
        d[i].nelems = t->nelems;
    }
    dc_status_t st = dc_layout_from_list(d, n, chunk_size, out);
    free(d);
    return st;
}

void dc_layout_free(dc_layout_t *l)
{
    if (!l)
        return;
    if (l->tensors)
        for (uint32_t i = 0; i < l->ntensors; i++)
            free(l->tensors[i].name);
    free(l->tensors);
    free(l->chunks);
    free(l);
}

/* --- placement ------------------------------------------------------------- */

dc_status_t dc_place_init(dc_place_t *p, const dc_layout_t *l)
{
    memset(p, 0, sizeof(*p));
    p->layout = l;
    return DC_OK;
}

void dc_place_fini(dc_place_t *p)
{
    free(p->segs);
    memset(p, 0, sizeof(*p));
}

dc_status_t dc_place_add(dc_place_t *p, uint32_t tensor, uint64_t offset, uint64_t len,
                         void *ptr)
{
    const dc_layout_t *l = p->layout;
    uint64_t end;
    if (tensor >= l->ntensors || !dc_add_u64(offset, len, &end) ||
        end > l->tensors[tensor].nbytes || (len && !ptr))
        return dc_error(DC_ERR_INVALID, "placement: segment %llu+%llu outside tensor %u",
                        (unsigned long long)offset, (unsigned long long)len, tensor);
    if (len == 0)
        return DC_OK;
    if (p->nsegs == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 16;
        dc_place_seg_t *s = realloc(p->segs, nc * sizeof(*s));
        if (!s)
            return dc_error(DC_ERR_NOMEM, "placement: out of memory");
        p->segs = s;
        p->cap = nc;
    }
    p->segs[p->nsegs++] = (dc_place_seg_t){tensor, offset, len, ptr};
    return DC_OK;
}

static size_t dc_place_find(const dc_place_t *p, uint32_t t, uint64_t off);

static int dc_place_cmp(const void *a, const void *b)
{
    const dc_place_seg_t *x = a, *y = b;
    if (x->tensor != y->tensor)
        return x->tensor < y->tensor ? -1 : 1;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return 0;
}

dc_status_t dc_place_finish(dc_place_t *p)
{
    const dc_layout_t *l = p->layout;
    if (p->nsegs)
        qsort(p->segs, p->nsegs, sizeof(*p->segs), dc_place_cmp);
    size_t k = 0;
    for (uint32_t t = 0; t < l->ntensors; t++) {
        uint64_t at = 0;
        while (k < p->nsegs && p->segs[k].tensor == t) {
            if (p->segs[k].offset != at)
                return dc_error(DC_ERR_INVALID,
                                "placement: tensor '%s' has a %s at byte %llu",
                                l->tensors[t].name, p->segs[k].offset < at ? "overlap" : "gap",
                                (unsigned long long)at);
            at += p->segs[k].len;
            k++;
        }
        if (at != l->tensors[t].nbytes)
            return dc_error(DC_ERR_INVALID, "placement: tensor '%s' covered up to %llu of %llu bytes",
                            l->tensors[t].name, (unsigned long long)at,
                            (unsigned long long)l->tensors[t].nbytes);
    }
    return DC_OK;
}

dc_status_t dc_place_finish_chunks(dc_place_t *p, const uint8_t *want)
{
    const dc_layout_t *l = p->layout;
    if (p->nsegs)
        qsort(p->segs, p->nsegs, sizeof(*p->segs), dc_place_cmp);
    for (size_t k = 1; k < p->nsegs; k++) {
        const dc_place_seg_t *a = &p->segs[k - 1], *b = &p->segs[k];
        if (a->tensor == b->tensor && a->offset + a->len > b->offset)
            return dc_error(DC_ERR_INVALID, "placement: tensor '%s' has an overlap at byte %llu",
                            l->tensors[b->tensor].name, (unsigned long long)b->offset);
    }
    for (uint32_t c = 0; c < l->nchunks; c++) {
        if (!want[c])
            continue;
        const dc_layout_chunk_t *ch = &l->chunks[c];
        uint64_t at = ch->offset, end = ch->offset + ch->len;
        size_t k = dc_place_find(p, ch->tensor, at);
        while (at < end && k < p->nsegs && p->segs[k].tensor == ch->tensor &&
               p->segs[k].offset <= at) {
            at = p->segs[k].offset + p->segs[k].len;
            k++;
        }
        if (at < end)
            return dc_error(DC_ERR_INVALID, "placement: tensor '%s' bytes %llu..%llu (chunk %u, "
                            "sent by this sender) are not covered from byte %llu",
                            l->tensors[ch->tensor].name, (unsigned long long)ch->offset,
                            (unsigned long long)end, c, (unsigned long long)at);
    }
    return DC_OK;
}

dc_status_t dc_place_from_st(dc_place_t *p, const dc_layout_t *l, const dc_st_file_t *f)
{
    dc_place_init(p, l);
    if (dc_st_count(f) != l->ntensors)
        return dc_error(DC_ERR_INVALID, "placement: file has %zu tensors, layout %u",
                        dc_st_count(f), l->ntensors);
    for (uint32_t i = 0; i < l->ntensors; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(f, i);
        if (strcmp(t->name, l->tensors[i].name) != 0 || t->dtype != l->tensors[i].dtype ||
            t->nelems != l->tensors[i].nelems) {
            dc_place_fini(p);
            return dc_error(DC_ERR_INVALID, "placement: tensor %u ('%s') differs from the layout",
                            i, t->name);
        }
        dc_status_t st = dc_place_add(p, i, 0, t->end - t->begin, dc_st_data(f, t));
        if (st != DC_OK) {
            dc_place_fini(p);
            return st;
        }
    }
    dc_status_t st = dc_place_finish(p);
    if (st != DC_OK)
        dc_place_fini(p);
    return st;
}

/* First segment index of tensor t covering byte `off` (segments sorted). */
static size_t dc_place_find(const dc_place_t *p, uint32_t t, uint64_t off)
{
    size_t lo = 0, hi = p->nsegs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const dc_place_seg_t *s = &p->segs[mid];
        if (s->tensor < t || (s->tensor == t && s->offset + s->len <= off))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

uint8_t *dc_place_chunk_ptr(const dc_place_t *p, uint32_t chunk)
{
    if (p->dev)
        return NULL; /* the CPU must not touch device memory */
    const dc_layout_chunk_t *c = &p->layout->chunks[chunk];
    size_t k = dc_place_find(p, c->tensor, c->offset);
    if (k >= p->nsegs)
        return NULL;
    const dc_place_seg_t *s = &p->segs[k];
    if (s->tensor != c->tensor || s->offset > c->offset ||
        s->offset + s->len < c->offset + c->len)
        return NULL;
    return s->ptr + (c->offset - s->offset);
}

uint8_t *dc_place_chunk_dev_ptr(const dc_place_t *p, uint32_t chunk)
{
    if (!p->dev)
        return NULL;
    const dc_layout_chunk_t *c = &p->layout->chunks[chunk];
    size_t k = dc_place_find(p, c->tensor, c->offset);
    if (k >= p->nsegs)
        return NULL;
    const dc_place_seg_t *s = &p->segs[k];
    if (s->tensor != c->tensor || s->offset > c->offset ||
        s->offset + s->len < c->offset + c->len)
        return NULL;
    return s->ptr + (c->offset - s->offset);
}

static dc_status_t dc_place_copy(const dc_place_t *p, uint32_t chunk, uint8_t *buf,
                                 int to_place)
{
    const dc_layout_chunk_t *c = &p->layout->chunks[chunk];
    uint64_t off = c->offset, done = 0;
    size_t k = dc_place_find(p, c->tensor, off);
    while (done < c->len && k < p->nsegs) {
        const dc_place_seg_t *s = &p->segs[k];
        uint64_t in = off + done - s->offset;
        uint64_t n = DC_MIN(s->len - in, c->len - done);
        if (p->dev) {
            dc_status_t st = to_place ? dc_kern_cuda_h2d(s->ptr + in, buf + done, n)
                                      : dc_kern_cuda_d2h(buf + done, s->ptr + in, n);
            if (st != DC_OK) {
                dc_error_prefix("placement: chunk %u of tensor '%s'", chunk,
                                p->layout->tensors[c->tensor].name);
                return st;
            }
        } else if (to_place) {
            memcpy(s->ptr + in, buf + done, n);
        } else {
            memcpy(buf + done, s->ptr + in, n);
        }
        done += n;
        k++;
    }
    return DC_OK;
}

dc_status_t dc_place_read(const dc_place_t *p, uint32_t chunk, uint8_t *dst)
{
    return dc_place_copy(p, chunk, dst, 0);
}

dc_status_t dc_place_read_dev(const dc_place_t *p, uint32_t chunk, uint8_t *dst)
{
    const dc_layout_chunk_t *c = &p->layout->chunks[chunk];
    uint64_t off = c->offset, done = 0;
    if (!p->dev)
        return dc_error(DC_ERR_INVALID, "placement: chunk %u is not in device memory", chunk);
    size_t k = dc_place_find(p, c->tensor, off);
    while (done < c->len && k < p->nsegs) {
        const dc_place_seg_t *s = &p->segs[k];
        uint64_t in = off + done - s->offset;
        uint64_t n = DC_MIN(s->len - in, c->len - done);
        dc_status_t st = dc_kern_cuda_d2d(dst + done, s->ptr + in, n);
        if (st != DC_OK) {
            dc_error_prefix("placement: chunk %u of tensor '%s'", chunk,
                            p->layout->tensors[c->tensor].name);
            return st;
        }
        done += n;
        k++;
    }
    return DC_OK;
}

dc_status_t dc_place_write(const dc_place_t *p, uint32_t chunk, const uint8_t *src)
{
    return dc_place_copy(p, chunk, (uint8_t *)src, 1);
}

dc_status_t dc_place_digest(const dc_place_t *p, uint32_t chunk, uint8_t *scratch,
                            dc_digest_t *out)
{
    const dc_layout_chunk_t *c = &p->layout->chunks[chunk];
    uint8_t *ptr = dc_place_chunk_ptr(p, chunk);
    if (!ptr) {
        dc_status_t st = dc_place_read(p, chunk, scratch);
        if (st != DC_OK)
            return st;
        ptr = scratch;
    }
    *out = dc_digest128(ptr, c->len);
    return DC_OK;
}

void dc_layout_chunk_map(const dc_layout_t *l, const dc_tree_t *tree, uint32_t nshards,
                         uint8_t *shard, uint32_t *stream, uint32_t *src)
{
    uint32_t S = nshards ? nshards : 1;
    const dc_tree_stream_t *streams = dc_tree_streams(tree);
    uint32_t first = 0, prev = UINT32_MAX, t = 0;
    uint64_t tbase = 0; /* canonical offset of tensor t */
    for (uint32_t c = 0; c < l->nchunks; c++) {
        const dc_layout_chunk_t *lc = &l->chunks[c];
        while (t < lc->tensor)
            tbase += l->tensors[t++].nbytes;
        uint64_t off = tbase + lc->offset; /* < 2^58: off * S fits */
        uint32_t sh = l->total_bytes ? (uint32_t)(off * S / l->total_bytes) : 0;
        if (sh >= S)
            sh = S - 1;
        if (sh != prev) {
            first = c;
            prev = sh;
        }
        shard[c] = (uint8_t)sh;
        uint32_t s = dc_tree_stream_of(tree, sh, c - first);
        stream[c] = s;
        src[c] = s == UINT32_MAX ? UINT32_MAX : streams[s].source;
    }
}
