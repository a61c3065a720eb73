/* delta.c - delta files: chunk grid, checkpoint digests, reader, diff (apply: delta_apply.c). */
#include "kernels/delta.h"
#include "kernels/delta_internal.h"

#include "kernels/entropy.h"
#include "kernels/kern.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

static dc_status_t dc_opts_chunk(const dc_delta_opts_t *o, uint64_t *cs);

/* ======================================================================== */
/*  Chunk grid and checkpoint digest                                        */
/* ======================================================================== */

uint64_t dc_delta_max_chunk_bytes(const dc_st_file_t *f, uint64_t chunk_size)
{
    uint64_t m = DC_CODEC_MIN_CHUNK;
    for (size_t i = 0; i < dc_st_count(f); i++) {
        const dc_st_tensor_t *t = dc_st_tensor(f, i);
        unsigned w = (unsigned)dc_dtype_size(t->dtype);
        uint64_t b = DC_MIN(dc_delta_chunk_elems(chunk_size, w), t->nelems) * w;
        m = DC_MAX(m, b);
    }
    return m;
}

dc_status_t dc_grid_init(dc_grid_t *g, const dc_st_file_t *f, uint64_t cs)
{
    g->nt = dc_st_count(f);
    g->cs = cs;
    g->gstart = calloc(g->nt + 1, sizeof(uint64_t));
    if (!g->gstart)
        return dc_error(DC_ERR_NOMEM, "chunk grid of %zu tensors", g->nt);
    uint64_t G = 0;
    for (size_t i = 0; i < g->nt; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(f, i);
        uint64_t ce = dc_delta_chunk_elems(cs, (unsigned)dc_dtype_size(t->dtype));
        g->gstart[i] = G;
        G += (t->nelems + ce - 1) / ce;
    }
    g->gstart[g->nt] = G;
    g->G = G;
    return DC_OK;
}

void dc_grid_free(dc_grid_t *g)
{
    free(g->gstart);
    g->gstart = NULL;
}

size_t dc_grid_tensor(const dc_grid_t *g, uint64_t gi)
{
    /* the last tensor whose first chunk is <= gi (skips empty tensors) */
    size_t lo = 0, hi = g->nt;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (g->gstart[mid] <= gi)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Bytes of global chunk gi of f: pointer and length. */
static const uint8_t *dc_grid_chunk(const dc_grid_t *g, const dc_st_file_t *f, uint64_t gi,
                                    size_t *bytes)
{
    size_t ti = dc_grid_tensor(g, gi);
    const dc_st_tensor_t *t = dc_st_tensor(f, ti);
    unsigned w = (unsigned)dc_dtype_size(t->dtype);
    uint64_t ce = dc_delta_chunk_elems(g->cs, w), off = (gi - g->gstart[ti]) * ce;
    *bytes = (size_t)(DC_MIN(ce, t->nelems - off) * w);
    return dc_st_data(f, t) + off * w;
}

dc_status_t dc_ckpt_digest_finish(const dc_st_file_t *f, uint64_t cs, const dc_digest_t *dg,
                                  uint64_t G, dc_digest_t *out)
{
    size_t len = 40 + 16 * (size_t)G;
    uint8_t *b = malloc(len);
    if (!b)
        return dc_error(DC_ERR_NOMEM, "checkpoint digest of %llu chunks", (unsigned long long)G);
    size_t hl;
    const uint8_t *h = dc_st_header_raw(f, &hl);
    dc_digest_t hd = dc_digest128(h, hl);
    memcpy(b, "DCCKPT1", 8);
    dc_store_le64(b + 8, dc_st_file_size(f));
    dc_store_le64(b + 16, cs);
    dc_store_le64(b + 24, hd.lo);
    dc_store_le64(b + 32, hd.hi);
    for (uint64_t i = 0; i < G; i++) {
        dc_store_le64(b + 40 + 16 * i, dg[i].lo);
        dc_store_le64(b + 48 + 16 * i, dg[i].hi);
    }
    *out = dc_digest128(b, len);
    free(b);
    return DC_OK;
}

typedef struct {
    const dc_grid_t *g;
    const dc_st_file_t *f;
    dc_digest_t *dg;
    const uint64_t *list; /* NULL: every chunk; else the chunks to hash */
} dc_dg_task_t;

static dc_status_t dc_dg_chunk(void *arg, size_t i)
{
    dc_dg_task_t *t = arg;
    uint64_t gi = t->list ? t->list[i] : i;
    size_t bytes;
    const uint8_t *p = dc_grid_chunk(t->g, t->f, gi, &bytes);
    t->dg[gi] = dc_digest128(p, bytes);
    return DC_OK;
}

dc_status_t dc_ckpt_digest(const dc_st_file_t *f, uint64_t cs, unsigned threads,
                           dc_digest_t *out)
{
    dc_grid_t g;
    dc_status_t st = dc_grid_init(&g, f, cs);
    if (st != DC_OK)
        return st;
    dc_digest_t *dg = malloc(sizeof(*dg) * (g.G ? g.G : 1));
    if (!dg) {
        dc_grid_free(&g);
        return dc_error(DC_ERR_NOMEM, "checkpoint digest");
    }
    dc_dg_task_t t = {&g, f, dg, NULL};
    st = dc_kern_parallel_for((size_t)g.G, dc_dg_chunk, &t, threads);
    if (st == DC_OK)
        st = dc_ckpt_digest_finish(f, cs, dg, g.G, out);
    free(dg);
    dc_grid_free(&g);
    return st;
}

/* Hash the chunks of the base tensors that no target tensor matches (their
 * digests are not computed on the way).  used[j] != 0 for matched ones. */
static dc_status_t dc_digest_unmatched(const dc_grid_t *g, const dc_st_file_t *f,
                                       const uint8_t *used, dc_digest_t *dg, unsigned threads)
{
    uint64_t n = 0;
    for (size_t j = 0; j < g->nt; j++)
        if (!used[j])
            n += g->gstart[j + 1] - g->gstart[j];
    if (n == 0)
        return DC_OK;
    uint64_t *list = malloc(sizeof(uint64_t) * n);
    if (!list)
        return dc_error(DC_ERR_NOMEM, "digest list");
    uint64_t k = 0;
    for (size_t j = 0; j < g->nt; j++)
        if (!used[j])
            for (uint64_t gi = g->gstart[j]; gi < g->gstart[j + 1]; gi++)
                list[k++] = gi;
    dc_dg_task_t t = {g, f, dg, list};
    dc_status_t st = dc_kern_parallel_for((size_t)n, dc_dg_chunk, &t, threads);
    free(list);
    return st;
}

/* Index of a tensor handle within its file (handles are array elements). */
static size_t dc_st_index(const dc_st_file_t *f, const dc_st_tensor_t *t)
{
    size_t i = (size_t)(t - dc_st_tensor(f, 0));
    return dc_st_tensor(f, i) == t ? i : SIZE_MAX;
}

/* For every tensor of `tgt`: the index of the base tensor with the same
 * name, dtype and element count, or SIZE_MAX; used[j] marks base tensors
 * matched.  */
dc_status_t dc_delta_match(const dc_st_file_t *base, const dc_st_file_t *tgt, size_t **bidx,
                           uint8_t **used)
{
    size_t nt = dc_st_count(tgt), nb = dc_st_count(base);
    size_t *bi = malloc(sizeof(size_t) * (nt + 1));
    uint8_t *u = calloc(nb + 1, 1);
    if (!bi || !u) {
        free(bi);
        free(u);
        return dc_error(DC_ERR_NOMEM, "tensor match table");
    }
    for (size_t i = 0; i < nt; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(tgt, i);
        const dc_st_tensor_t *b = dc_st_find(base, t->name);
        bi[i] = SIZE_MAX;
        if (b && b->dtype == t->dtype && b->nelems == t->nelems) {
            size_t j = dc_st_index(base, b);
            if (j != SIZE_MAX) {
                bi[i] = j;
                u[j] = 1;
            }
        }
    }
    *bidx = bi;
    *used = u;
    return DC_OK;
}

DC_API dc_status_t dc_checkpoint_digest(const void *buf, size_t len, uint64_t chunk_size,
                                        unsigned threads, uint8_t out[16])
{
    if ((!buf && len) || !out)
        return dc_error(DC_ERR_INVALID, "dc_checkpoint_digest: bad arguments");
    dc_delta_opts_t o = {.size = sizeof(o), .chunk_size = chunk_size};
    uint64_t cs = 0; /* set by dc_opts_chunk() when it returns DC_OK */
    dc_status_t st = dc_opts_chunk(&o, &cs);
    if (st != DC_OK)
        return st;
    dc_st_file_t *f;
    if ((st = dc_st_open_mem(buf, len, "checkpoint", &f)) != DC_OK)
        return st;
    dc_digest_t d;
    st = dc_ckpt_digest(f, cs, threads, &d);
    dc_st_close(f);
    if (st != DC_OK)
        return st;
    dc_store_le64(out, d.lo);
    dc_store_le64(out + 8, d.hi);
    return DC_OK;
}

DC_API void dc_free(void *p) { free(p); }

/* ======================================================================== */
/*  Codec context pool (one context per concurrently running task)          */
/* ======================================================================== */

void dc_delta_pool_init(dc_pool_t *p, size_t max_bytes)
{
    pthread_mutex_init(&p->mu, NULL);
    p->n = 0;
    p->max_bytes = max_bytes;
}

dc_status_t dc_delta_pool_get(dc_pool_t *p, dc_codec_t **out)
{
    pthread_mutex_lock(&p->mu);
    dc_codec_t *c = p->n ? p->items[--p->n] : NULL;
    pthread_mutex_unlock(&p->mu);
    if (c) {
        *out = c;
        return DC_OK;
    }
    return dc_codec_create(p->max_bytes, out);
}

void dc_delta_pool_put(dc_pool_t *p, dc_codec_t *c)
{
    pthread_mutex_lock(&p->mu);
    if (p->n < DC_ARRAY_SIZE(p->items)) {
        p->items[p->n++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    dc_codec_free(c);
}

void dc_delta_pool_destroy(dc_pool_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        dc_codec_free(p->items[i]);
    p->n = 0;
    pthread_mutex_destroy(&p->mu);
}

/* ======================================================================== */
/*  Reader                                                                  */
/* ======================================================================== */

static int dc_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

uint64_t dc_delta_digest_min = 1u << 20;

/* Unsigned LEB128 at b[*pos..end): at most 10 bytes, minimal, no overflow. */
static dc_status_t dc_varint_get(const uint8_t *b, size_t end, size_t *pos, uint64_t *out,
                                 const char *what)
{
    uint64_t v = 0;
    size_t p = *pos;
    for (unsigned i = 0;; i++) {
        if (p >= end)
            return dc_error(DC_ERR_FORMAT, "delta record %s: varint runs past the end", what);
        uint8_t c = b[p++];
        if (i == 9 && c > 1)
            return dc_error(DC_ERR_FORMAT, "delta record %s: varint overflows 64 bits", what);
        v |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80)) {
            if (c == 0 && i > 0)
                return dc_error(DC_ERR_FORMAT, "delta record %s: varint not minimal", what);
            break;
        }
    }
    *pos = p;
    *out = v;
    return DC_OK;
}

static size_t dc_varint_put(uint8_t *b, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        b[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b[n++] = (uint8_t)v;
    return n;
}

/* One v2 record header at b[*pos..end) (bounds only). */
typedef struct {
    uint64_t skip;
    uint16_t enc;
    int has_dg;
    uint32_t len;
    dc_digest_t dg;
} dc_rec_t;

static dc_status_t dc_rec_get(const uint8_t *b, size_t end, size_t *pos, dc_rec_t *rec)
{
    uint64_t e, l;
    dc_status_t st;
    if ((st = dc_varint_get(b, end, pos, &rec->skip, "chunk index")) != DC_OK)
        return st;
    if (*pos >= end)
        return dc_error(DC_ERR_FORMAT, "delta record truncated before its encoding");
    e = b[(*pos)++];
    if ((st = dc_varint_get(b, end, pos, &l, "payload length")) != DC_OK)
        return st;
    unsigned kind = (unsigned)(e >> 1) & 7u, pc = (unsigned)(e >> 4) & 3u, vm = (unsigned)(e >> 6);
    if (kind < 1 || kind > DC_ENC_KIND_MAX || pc == 3)
        return dc_error(DC_ERR_FORMAT, "delta record encoding code 0x%02llx out of range",
                        (unsigned long long)e);
    if (l > DC_FRAME_MAX_PAYLOAD)
        return dc_error(DC_ERR_FORMAT, "delta record payload length %llu too large",
                        (unsigned long long)l);
    rec->enc = dc_enc_make(kind, pc == 1 ? DC_ENT_GOLOMB : pc == 2 ? DC_ENT_GAPS : 0, vm);
    rec->has_dg = (int)(e & 1);
    rec->len = (uint32_t)l;
    rec->dg.lo = rec->dg.hi = 0;
    if (rec->has_dg) {
        if (end - *pos < 16)
            return dc_error(DC_ERR_FORMAT, "delta record digest runs past the end");
        rec->dg.lo = dc_load_le64(b + *pos);
        rec->dg.hi = dc_load_le64(b + *pos + 8);
        *pos += 16;
    }
    return DC_OK;
}

void dc_delta_reader_free(dc_delta_reader_t *r)
{
    if (!r)
        return;
    if (r->lay)
        dc_st_close(r->lay);
    if (r->lay_map)
        dc_delta_layout_free(r, r->lay_map);
    free(r->th_owned);
    r->lay = NULL;
    r->lay_map = NULL;
    r->th_owned = NULL;
}

/* v2: the target layout and grid size, once the target header is known. */
static dc_status_t dc_reader_grid(dc_delta_reader_t *r)
{
    dc_status_t st = dc_delta_layout(r, &r->lay, &r->lay_map);
    if (st != DC_OK)
        return st;
    uint64_t G = 0;
    for (size_t i = 0; i < dc_st_count(r->lay); i++) {
        const dc_st_tensor_t *t = dc_st_tensor(r->lay, i);
        uint64_t ce = dc_delta_chunk_elems(r->info.chunk_size, (unsigned)dc_dtype_size(t->dtype));
        G += (t->nelems + ce - 1) / ce;
    }
    r->G = G;
    r->next_g = 0;
    r->cur_t = 0;
    r->cur_g0 = 0;
    r->cur_n = 0;
    if (dc_st_count(r->lay)) {
        const dc_st_tensor_t *t = dc_st_tensor(r->lay, 0);
        uint64_t ce = dc_delta_chunk_elems(r->info.chunk_size, (unsigned)dc_dtype_size(t->dtype));
        r->cur_n = (t->nelems + ce - 1) / ce;
    }
    return DC_OK;
}

dc_status_t dc_delta_reader_init_base(dc_delta_reader_t *r, const uint8_t *b, size_t len,
                                      const dc_st_file_t *base)
{
    memset(r, 0, sizeof(*r));
    if (len < 8 || memcmp(b, DC_DELTA_MAGIC, 8) != 0)
        return dc_error(DC_ERR_FORMAT, "not a deltacast delta file (bad magic)");
    if (len < DC_DELTA_HEADER_SIZE)
        return dc_error(DC_ERR_FORMAT, "delta file truncated in its header (%zu bytes)", len);
    if (dc_crc32c(0, b, 124) != dc_load_le32(b + 124))
        return dc_error(DC_ERR_FORMAT, "delta file header CRC mismatch (corrupted)");
    dc_delta_info_t in;
    memset(&in, 0, sizeof(in));
    in.version = dc_load_le32(b + 8);
    in.flags = dc_load_le32(b + 12);
    if (in.version < DC_DELTA_VERSION_MIN || in.version > DC_DELTA_VERSION)
        return dc_error(DC_ERR_FORMAT,
                        "delta file version %u is not supported by this build (supports %d-%d)",
                        in.version, DC_DELTA_VERSION_MIN, DC_DELTA_VERSION);
    int v2 = in.version == 2;
    if ((in.flags & ~(v2 ? DC_DELTA_F_KNOWN : 0u)) ||
        (in.flags & DC_DELTA_F_KNOWN) == DC_DELTA_F_KNOWN ||
        !dc_zero(b + (v2 ? 108 : 100), v2 ? 16 : 24))
        return dc_error(DC_ERR_FORMAT, "delta header has unknown flags or reserved bytes");
    in.chunk_size = dc_load_le64(b + 16);
    in.base_size = dc_load_le64(b + 24);
    in.base_digest.lo = dc_load_le64(b + 32);
    in.base_digest.hi = dc_load_le64(b + 40);
    in.target_size = dc_load_le64(b + 48);
    in.target_digest.lo = dc_load_le64(b + 56);
    in.target_digest.hi = dc_load_le64(b + 64);
    in.target_header_len = dc_load_le64(b + 72);
    in.frame_count = dc_load_le64(b + 80);
    in.frames_bytes = dc_load_le64(b + 88);
    in.target_header_stored = v2 ? dc_load_le64(b + 100) : in.target_header_len;
    if (in.chunk_size < DC_CODEC_MIN_CHUNK || in.chunk_size > DC_CODEC_MAX_CHUNK)
        return dc_error(DC_ERR_FORMAT, "delta chunk size %llu out of range",
                        (unsigned long long)in.chunk_size);
    if (in.target_header_len < 8 || in.target_header_len > (uint64_t)DC_ST_MAX_HEADER + 8 ||
        in.target_header_len > in.target_size)
        return dc_error(DC_ERR_FORMAT, "delta target header length %llu out of range",
                        (unsigned long long)in.target_header_len);
    uint64_t S = in.target_header_stored;
    if (v2 && ((in.flags & DC_DELTA_F_TH_BASE)   ? S != 0
               : (in.flags & DC_DELTA_F_TH_ZSTD) ? S == 0 || S > in.target_header_len + 1024
                                                 : S != in.target_header_len))
        return dc_error(DC_ERR_FORMAT, "delta stored target header size %llu inconsistent",
                        (unsigned long long)S);
    uint64_t total;
    if (!dc_add_u64(DC_DELTA_HEADER_SIZE + S, in.frames_bytes, &total))
        return dc_error(DC_ERR_FORMAT, "delta sizes overflow");
    if (total > len)
        return dc_error(DC_ERR_FORMAT, "delta file truncated: %zu of %llu bytes", len,
                        (unsigned long long)total);
    if (total < len)
        return dc_error(DC_ERR_FORMAT, "delta file has %llu trailing bytes",
                        (unsigned long long)(len - total));
    if (in.frame_count > in.frames_bytes / (v2 ? 3 : DC_FRAME_HEADER_SIZE))
        return dc_error(DC_ERR_FORMAT, "delta frame count %llu inconsistent",
                        (unsigned long long)in.frame_count);
    const uint8_t *stored = b + DC_DELTA_HEADER_SIZE, *th = stored;
    uint32_t thcrc = dc_load_le32(b + 96);
    r->buf = b;
    r->len = len;
    r->info = in;
    r->off = DC_DELTA_HEADER_SIZE + S;
    r->frames_read = 0;
    if (v2 && (in.flags & DC_DELTA_F_TH_BASE)) {
        if (!base)
            return DC_OK; /* the file header only: target_header stays NULL */
        size_t bhl;
        th = dc_st_header_raw(base, &bhl);
        if (bhl != in.target_header_len || dc_crc32c(0, th, bhl) != thcrc)
            return dc_error(DC_ERR_WRONG_BASE,
                            "the delta's target header is its base's, and this base's header "
                            "differs: the delta was made for a different base");
    } else if (v2 && (in.flags & DC_DELTA_F_TH_ZSTD)) {
        if (dc_crc32c(0, stored, S) != thcrc)
            return dc_error(DC_ERR_FORMAT, "delta target header CRC mismatch (corrupted)");
        unsigned long long fs = ZSTD_getFrameContentSize(stored, S);
        if (fs != in.target_header_len)
            return dc_error(DC_ERR_FORMAT,
                            "delta compressed target header does not say %llu "
                            "bytes",
                            (unsigned long long)in.target_header_len);
        r->th_owned = malloc(in.target_header_len);
        if (!r->th_owned)
            return dc_error(DC_ERR_NOMEM, "delta target header of %llu bytes",
                            (unsigned long long)in.target_header_len);
        size_t z = ZSTD_decompress(r->th_owned, in.target_header_len, stored, S);
        if (ZSTD_isError(z) || z != in.target_header_len)
            return dc_error(DC_ERR_FORMAT, "delta compressed target header is corrupt");
        th = r->th_owned;
    } else if (dc_crc32c(0, th, in.target_header_len) != thcrc) {
        return dc_error(DC_ERR_FORMAT, "delta target header CRC mismatch (corrupted)");
    }
    /* the header is whole: its own length field names exactly the bytes the
     * delta carries (a shorter one would have the target's header parsed
     * from whatever the caller's output buffer held after it) */
    if (dc_load_le64(th) != in.target_header_len - 8)
        return dc_error(DC_ERR_FORMAT,
                        "delta target header: its length field says %llu "
                        "bytes, the delta carries %llu",
                        (unsigned long long)dc_load_le64(th),
                        (unsigned long long)(in.target_header_len - 8));
    r->target_header = th;
    if (v2)
        return dc_reader_grid(r);
    return DC_OK;
}

dc_status_t dc_delta_reader_init(dc_delta_reader_t *r, const uint8_t *b, size_t len)
{
    return dc_delta_reader_init_base(r, b, len, NULL);
}

/* v2: enter the group at r->off: check every record header and both CRCs
 * before any record is handed out. */
static dc_status_t dc_reader_group(dc_delta_reader_t *r)
{
    const uint8_t *b = r->buf;
    size_t end = r->len, pos = r->off;
    uint64_t n;
    dc_status_t st = dc_varint_get(b, end, &pos, &n, "group size");
    if (st != DC_OK)
        return st;
    if (n < 1 || n > DC_DELTA_GROUP_MAX)
        return dc_error(DC_ERR_FORMAT, "delta record group of %llu records", (unsigned long long)n);
    if (n > r->info.frame_count - r->frames_read)
        return dc_error(DC_ERR_FORMAT, "delta holds more records than its header's %llu",
                        (unsigned long long)r->info.frame_count);
    size_t hp = pos;
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        dc_rec_t rec;
        if ((st = dc_rec_get(b, end, &pos, &rec)) != DC_OK)
            return st;
        sum += rec.len;
    }
    if (end - pos < 4)
        return dc_error(DC_ERR_FORMAT, "delta record group truncated");
    if (dc_crc32c(0, b + r->off, pos - r->off) != dc_load_le32(b + pos))
        return dc_error(DC_ERR_CORRUPT, "delta record group header CRC32C mismatch (corrupted)");
    pos += 4;
    if (sum > end - pos || end - pos - sum < 4)
        return dc_error(DC_ERR_FORMAT, "delta record group: payloads run past the end");
    uint32_t pcrc = dc_load_le32(b + pos + sum);
    if (n > 1 && dc_crc32c(0, b + pos, (size_t)sum) != pcrc)
        return dc_error(DC_ERR_CORRUPT, "delta record group payload CRC32C mismatch (corrupted)");
    r->grp_left = r->grp_n = (uint32_t)n;
    r->grp_crc = pcrc;
    r->grp_hp = hp;
    r->grp_pp = pos;
    r->grp_end = pos + (size_t)sum + 4;
    return DC_OK;
}

static dc_status_t dc_reader_next_v2(dc_delta_reader_t *r, dc_frame_hdr_t *h,
                                     const uint8_t **payload, int *done)
{
    if (!r->lay)
        return dc_error(DC_ERR_INVALID, "the delta's target header is its base's: reading its "
                                        "records needs its base");
    dc_status_t st;
    if (r->grp_left == 0) {
        if (r->off == r->len) {
            if (r->frames_read != r->info.frame_count)
                return dc_error(DC_ERR_FORMAT, "delta holds %llu records, header says %llu",
                                (unsigned long long)r->frames_read,
                                (unsigned long long)r->info.frame_count);
            *done = 1;
            return DC_OK;
        }
        if (r->frames_read >= r->info.frame_count)
            return dc_error(DC_ERR_FORMAT, "delta has bytes after its last record");
        if ((st = dc_reader_group(r)) != DC_OK) {
            dc_error_prefix("record %llu", (unsigned long long)r->frames_read);
            return st;
        }
    }
    dc_rec_t rec;
    if ((st = dc_rec_get(r->buf, r->len, &r->grp_hp, &rec)) != DC_OK)
        return st; /* checked on entry: not reached */
    if (rec.skip >= r->G - DC_MIN(r->next_g, r->G))
        return dc_error(DC_ERR_FORMAT, "record %llu names a chunk past the target's %llu",
                        (unsigned long long)r->frames_read, (unsigned long long)r->G);
    uint64_t g = r->next_g + rec.skip;
    while (g >= r->cur_g0 + r->cur_n) {
        r->cur_g0 += r->cur_n;
        r->cur_t++;
        const dc_st_tensor_t *t = dc_st_tensor(r->lay, r->cur_t);
        uint64_t ce = dc_delta_chunk_elems(r->info.chunk_size, (unsigned)dc_dtype_size(t->dtype));
        r->cur_n = (t->nelems + ce - 1) / ce;
    }
    const dc_st_tensor_t *t = dc_st_tensor(r->lay, r->cur_t);
    unsigned w = (unsigned)dc_dtype_size(t->dtype);
    uint64_t ce = dc_delta_chunk_elems(r->info.chunk_size, w), ci = g - r->cur_g0;
    dc_frame_hdr_t fh = {
        .type = DC_FRAME_CHUNK,
        .dtype = (uint8_t)t->dtype,
        .encoding = rec.enc,
        .tensor_id = (uint32_t)r->cur_t,
        .chunk_index = (uint32_t)ci,
        .elem_offset = ci * ce,
        .elem_count = DC_MIN(ce, t->nelems - ci * ce),
        .payload_len = rec.len,
        .target_digest = rec.dg,
    };
    /* the wire header's own checks (encoding kind and methods, counts) */
    uint8_t enc[DC_FRAME_HEADER_SIZE];
    dc_frame_encode(&fh, enc);
    if ((st = dc_frame_decode(enc, sizeof(enc), &fh)) != DC_OK) {
        dc_error_prefix("record %llu", (unsigned long long)r->frames_read);
        return st;
    }
    fh.no_digest = !rec.has_dg;
    *payload = r->buf + r->grp_pp;
    fh.payload_crc = r->grp_n == 1 ? r->grp_crc : dc_crc32c(0, *payload, rec.len);
    r->grp_pp += rec.len;
    r->next_g = g + 1;
    r->frames_read++;
    if (--r->grp_left == 0)
        r->off = r->grp_end;
    *h = fh;
    *done = 0;
    return DC_OK;
}

dc_status_t dc_delta_reader_next(dc_delta_reader_t *r, dc_frame_hdr_t *h,
                                 const uint8_t **payload, int *done)
{
    if (r->info.version == 2)
        return dc_reader_next_v2(r, h, payload, done);
    if (r->off == r->len) {
        if (r->frames_read != r->info.frame_count)
            return dc_error(DC_ERR_FORMAT, "delta holds %llu frames, header says %llu",
                            (unsigned long long)r->frames_read,
                            (unsigned long long)r->info.frame_count);
        *done = 1;
        return DC_OK;
    }
    if (r->frames_read >= r->info.frame_count)
        return dc_error(DC_ERR_FORMAT, "delta has bytes after its last frame");
    dc_frame_hdr_t fh;
    dc_status_t st = dc_frame_decode(r->buf + r->off, r->len - r->off, &fh);
    if (st != DC_OK) {
        dc_error_prefix("frame %llu", (unsigned long long)r->frames_read);
        return st;
    }
    if (fh.payload_len > r->len - r->off - DC_FRAME_HEADER_SIZE)
        return dc_error(DC_ERR_FORMAT, "frame %llu: payload runs past the end of the delta",
                        (unsigned long long)r->frames_read);
    *payload = r->buf + r->off + DC_FRAME_HEADER_SIZE;
    r->off += DC_FRAME_HEADER_SIZE + fh.payload_len;
    r->frames_read++;
    *h = fh;
    *done = 0;
    return DC_OK;
}

dc_status_t dc_delta_layout(const dc_delta_reader_t *r, dc_st_file_t **out, void **map)
{
    if (!r->target_header)
        return dc_error(DC_ERR_INVALID, "the delta's target header is its base's: its layout "
                                        "needs its base");
    size_t sz = (size_t)r->info.target_size;
    void *m = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED)
        return dc_error_errno(DC_ERR_FORMAT, errno, "delta target size %zu cannot be mapped",
                              sz);
    memcpy(m, r->target_header, r->info.target_header_len);
    dc_status_t st = dc_st_open_mem(m, sz, "delta target header", out);
    if (st != DC_OK) {
        munmap(m, sz);
        if (st != DC_ERR_NOMEM)
            st = DC_ERR_FORMAT;
        return st;
    }
    *map = m;
    return DC_OK;
}

void dc_delta_layout_free(const dc_delta_reader_t *r, void *map)
{
    if (map)
        munmap(map, (size_t)r->info.target_size);
}

/* ======================================================================== */
/*  Diff                                                                    */
/* ======================================================================== */

typedef struct {
    int fd;          /* >= 0: file */
    uint8_t *mem;    /* else: growable buffer */
    size_t len, cap;
    const char *name;
} dc_sink_t;

static dc_status_t dc_sink_write(dc_sink_t *s, const void *buf, size_t len)
{
    if (s->fd >= 0) {
        dc_status_t st = dc_write_full(s->fd, buf, len);
        if (st != DC_OK)
            dc_error_prefix("writing '%s'", s->name);
        s->len += len;
        return st;
    }
    if (s->len + len > s->cap) {
        size_t nc = DC_MAX(s->cap * 2, s->len + len + 4096);
        uint8_t *p = realloc(s->mem, nc);
        if (!p)
            return dc_error(DC_ERR_NOMEM, "delta buffer of %zu bytes", nc);
        s->mem = p;
        s->cap = nc;
    }
    memcpy(s->mem + s->len, buf, len);
    s->len += len;
    return DC_OK;
}

typedef struct {
    uint32_t tensor, chunk;
    uint64_t off, cnt;
    unsigned w;
    uint8_t dtype;
    const uint8_t *base, *next;
    dc_digest_t *base_dg, *next_dg; /* where the chunk digests go */
    uint8_t *out;
    size_t len;
    uint16_t enc;
    int emit;
    dc_chunk_stats_t st;
    uint32_t crc; /* CRC32C of the payload */
} dc_job_t;

typedef struct {
    dc_job_t *jobs;
    dc_pool_t pool;
    size_t out_cap;
    unsigned layout; /* DC_CODEC_LAYOUT_*, 0: the codec's own (config) */
} dc_diff_ctx_t;

static dc_status_t dc_diff_task(void *arg, size_t i)
{
    dc_diff_ctx_t *d = arg;
    dc_job_t *j = &d->jobs[i];
    dc_codec_t *c;
    dc_status_t st = dc_delta_pool_get(&d->pool, &c);
    if (st != DC_OK)
        return st;
    if (d->layout)
        dc_codec_set_layout(c, d->layout);
    /* the chunk digests come from the diff's own pass over the data */
    st = dc_codec_encode_digest(c, j->base, j->next, (size_t)j->cnt, j->w, j->out, d->out_cap,
                                &j->len, &j->enc, &j->st, j->base_dg, j->next_dg);
    dc_delta_pool_put(&d->pool, c);
    if (st != DC_OK)
        return st;
    if (j->len > DC_FRAME_MAX_PAYLOAD)
        return dc_error(DC_ERR_INTERNAL, "chunk payload of %zu bytes exceeds the frame limit",
                        j->len);
    j->emit = j->base == NULL || j->st.changed != 0;
    if (j->emit)
        j->crc = dc_crc32c(0, j->out, j->len);
    return DC_OK;
}

/* v2 record groups (delta.h): small records collect here until the group
 * is full; a large one goes out in a group of its own. */
typedef struct {
    uint8_t *hdr, *pay;
    size_t hlen, plen;
    uint32_t n;
    uint64_t next_g; /* the next record's least global chunk index */
    uint64_t bytes;  /* bytes of groups written */
} dc_groups_t;

#define DC_REC_MAX 40 /* 10 + 3 + 5 + 16, rounded up */

static dc_status_t dc_groups_init(dc_groups_t *w)
{
    memset(w, 0, sizeof(*w));
    w->hdr = malloc((size_t)DC_DELTA_GROUP_MAX * DC_REC_MAX);
    w->pay = malloc(DC_DELTA_GROUP_BYTES + DC_DELTA_GROUP_SMALL);
    if (!w->hdr || !w->pay)
        return dc_error(DC_ERR_NOMEM, "delta record group buffers");
    return DC_OK;
}

static void dc_groups_free(dc_groups_t *w)
{
    free(w->hdr);
    free(w->pay);
}

/* Write one group: n, the record headers, their CRC, the payloads (from
 * `pay`, or the single payload `one` with its CRC `one_crc`), their CRC. */
static dc_status_t dc_groups_emit(dc_groups_t *w, dc_sink_t *sink, uint32_t n, const uint8_t *hdr,
                                  size_t hlen, const uint8_t *pay, size_t plen, uint32_t pcrc)
{
    uint8_t pre[10], c[4];
    size_t pl = dc_varint_put(pre, n);
    dc_status_t st;
    dc_store_le32(c, dc_crc32c(dc_crc32c(0, pre, pl), hdr, hlen));
    if ((st = dc_sink_write(sink, pre, pl)) != DC_OK ||
        (st = dc_sink_write(sink, hdr, hlen)) != DC_OK ||
        (st = dc_sink_write(sink, c, 4)) != DC_OK || (st = dc_sink_write(sink, pay, plen)) != DC_OK)
        return st;
    dc_store_le32(c, pcrc);
    if ((st = dc_sink_write(sink, c, 4)) != DC_OK)
        return st;
    w->bytes += pl + hlen + 4 + plen + 4;
    return DC_OK;
}

static dc_status_t dc_groups_flush(dc_groups_t *w, dc_sink_t *sink)
{
    if (w->n == 0)
        return DC_OK;
    dc_status_t st = dc_groups_emit(w, sink, w->n, w->hdr, w->hlen, w->pay, w->plen,
                                    dc_crc32c(0, w->pay, w->plen));
    w->n = 0;
    w->hlen = w->plen = 0;
    return st;
}

static dc_status_t dc_groups_add(dc_groups_t *w, dc_sink_t *sink, uint64_t g, const dc_job_t *j)
{
    uint8_t rec[DC_REC_MAX];
    size_t rl = dc_varint_put(rec, g - w->next_g);
    int dg = j->cnt * j->w >= dc_delta_digest_min;
    unsigned pm = dc_enc_pos_method(j->enc);
    rec[rl++] = (uint8_t)((unsigned)dg | dc_enc_kind(j->enc) << 1 |
                          (pm == DC_ENT_GOLOMB ? 1u : pm == DC_ENT_GAPS ? 2u : 0u) << 4 |
                          dc_enc_val_method(j->enc) << 6);
    rl += dc_varint_put(rec + rl, j->len);
    if (dg) {
        dc_store_le64(rec + rl, j->next_dg->lo);
        dc_store_le64(rec + rl + 8, j->next_dg->hi);
        rl += 16;
    }
    w->next_g = g + 1;
    dc_status_t st;
    if (j->len >= DC_DELTA_GROUP_SMALL) {
        if ((st = dc_groups_flush(w, sink)) != DC_OK)
            return st;
        return dc_groups_emit(w, sink, 1, rec, rl, j->out, j->len, j->crc);
    }
    memcpy(w->hdr + w->hlen, rec, rl);
    w->hlen += rl;
    memcpy(w->pay + w->plen, j->out, j->len);
    w->plen += j->len;
    if (++w->n == DC_DELTA_GROUP_MAX || w->plen >= DC_DELTA_GROUP_BYTES)
        return dc_groups_flush(w, sink);
    return DC_OK;
}

/* The dc_opts_* and dc_delta_opts_* readers take options already through
 * dc_delta_args() (full size, fields an older caller lacks zeroed). */
static dc_status_t dc_opts_chunk(const dc_delta_opts_t *o, uint64_t *cs)
{
    uint64_t v = 0;
    if (o->chunk_size)
        v = o->chunk_size;
    else {
        dc_status_t st = dc_config_get_size("chunk_size", &v);
        if (st != DC_OK)
            return st;
    }
    if (v < DC_CODEC_MIN_CHUNK || v > DC_CODEC_MAX_CHUNK)
        return dc_error(DC_ERR_INVALID, "chunk size %llu out of range [%u, %u]",
                        (unsigned long long)v, DC_CODEC_MIN_CHUNK, DC_CODEC_MAX_CHUNK);
    *cs = v;
    return DC_OK;
}

static dc_status_t dc_opts_layout(const dc_delta_opts_t *o, unsigned *layout)
{
    *layout = 0;
    if (!o->layout)
        return DC_OK;
    if (o->layout != DC_DELTA_LAYOUT_SIMD && o->layout != DC_DELTA_LAYOUT_COMPACT)
        return dc_error(DC_ERR_INVALID, "delta layout %u is not DC_DELTA_LAYOUT_SIMD or "
                        "DC_DELTA_LAYOUT_COMPACT", o->layout);
    *layout = o->layout == DC_DELTA_LAYOUT_SIMD ? DC_CODEC_LAYOUT_SIMD : DC_CODEC_LAYOUT_COMPACT;
    return DC_OK;
}

int dc_delta_opts_strict(const dc_delta_opts_t *o)
{
    return o->strict_base;
}

unsigned dc_delta_opts_threads(const dc_delta_opts_t *o)
{
    if (o->threads)
        return o->threads;
    return (unsigned)dc_cpu_count();
}

void dc_delta_stats_out(dc_delta_stats_t *out, const dc_delta_stats_t *s)
{
    if (out)
        dc_struct_out(out, s, sizeof(*s));
}

/* The size rule of include/deltacast.h for a call's options and stats:
 * `opts` (may be NULL) is copied into `o` with the fields an older caller
 * lacks zeroed; a newer caller's unknown non-zero fields are refused. */
dc_status_t dc_delta_args(const dc_delta_opts_t *opts, dc_delta_opts_t *o,
                          const dc_delta_stats_t *stats)
{
    memset(o, 0, sizeof(*o));
    o->size = sizeof(*o);
    dc_status_t st;
    if (opts && (st = dc_struct_in(o, sizeof(*o), opts, offsetof(dc_delta_opts_t, strict_base),
                                   "delta options")) != DC_OK)
        return st;
    /* 0.2 callers' stats end before frames_ctx */
    if (stats && (st = dc_struct_check(stats, offsetof(dc_delta_stats_t, frames_ctx),
                                       sizeof(*stats), "delta stats")) != DC_OK)
        return st;
    return DC_OK;
}

static dc_status_t dc_diff_core(dc_st_file_t *base, dc_st_file_t *next,
                                const dc_delta_opts_t *opts, dc_sink_t *sink,
                                dc_delta_stats_t *ss, uint8_t hdr[DC_DELTA_HEADER_SIZE])
{
    uint64_t cs = 0;
    dc_status_t st = dc_opts_chunk(opts, &cs);
    if (st != DC_OK)
        return st;
    unsigned threads = dc_delta_opts_threads(opts);
    uint64_t bsz = dc_st_file_size(base), nsz = dc_st_file_size(next);
    size_t thl, bhl;
    const uint8_t *th = dc_st_header_raw(next, &thl), *bh = dc_st_header_raw(base, &bhl);
    /* the target header: the base's (not stored), compressed, or as is */
    uint32_t flags = 0;
    const uint8_t *stored = th;
    size_t S = thl;
    uint8_t *zbuf = NULL;
    if (bhl == thl && memcmp(bh, th, thl) == 0) {
        flags = DC_DELTA_F_TH_BASE;
        S = 0;
    } else {
        size_t zcap = ZSTD_compressBound(thl);
        zbuf = malloc(zcap);
        if (!zbuf)
            return dc_error(DC_ERR_NOMEM, "compressing a target header of %zu bytes", thl);
        size_t z = ZSTD_compress(zbuf, zcap, th, thl, 9);
        if (!ZSTD_isError(z) && z < thl) {
            flags = DC_DELTA_F_TH_ZSTD;
            stored = zbuf;
            S = z;
        }
    }
    memset(hdr, 0, DC_DELTA_HEADER_SIZE);
    st = dc_sink_write(sink, hdr, DC_DELTA_HEADER_SIZE);
    if (st == DC_OK)
        st = dc_sink_write(sink, stored, S);
    uint32_t stored_crc = dc_crc32c(0, flags == DC_DELTA_F_TH_ZSTD ? stored : th,
                                    flags == DC_DELTA_F_TH_ZSTD ? S : thl);
    free(zbuf);
    if (st != DC_OK)
        return st;
    dc_groups_t grp;
    memset(&grp, 0, sizeof(grp));

    dc_grid_t bg = {0}, ng = {0};
    dc_digest_t *bdg = NULL, *ndg = NULL;
    size_t *bidx = NULL;
    uint8_t *used = NULL, *outbuf = NULL;
    dc_diff_ctx_t d;
    memset(&d, 0, sizeof(d));
    if ((st = dc_opts_layout(opts, &d.layout)) != DC_OK)
        return st;
    if ((st = dc_groups_init(&grp)) != DC_OK) {
        dc_groups_free(&grp);
        return st;
    }
    size_t maxc = (size_t)dc_delta_max_chunk_bytes(next, cs);
    dc_delta_pool_init(&d.pool, maxc);
    if ((st = dc_grid_init(&bg, base, cs)) != DC_OK ||
        (st = dc_grid_init(&ng, next, cs)) != DC_OK ||
        (st = dc_delta_match(base, next, &bidx, &used)) != DC_OK)
        goto out;
    bdg = malloc(sizeof(dc_digest_t) * (bg.G + 1));
    ndg = malloc(sizeof(dc_digest_t) * (ng.G + 1));
    size_t batch = DC_MAX((size_t)threads * 4, (size_t)((64u << 20) / cs));
    batch = DC_MIN(batch, (size_t)4096);
    d.out_cap = dc_codec_payload_bound(maxc);
    d.jobs = calloc(batch, sizeof(dc_job_t));
    outbuf = malloc(batch * d.out_cap);
    if (!bdg || !ndg || !d.jobs || !outbuf) {
        st = dc_error(DC_ERR_NOMEM, "diff buffers (%zu chunks)", batch);
        goto out;
    }
    for (size_t i = 0; i < batch; i++)
        d.jobs[i].out = outbuf + i * d.out_cap;
    /* base tensors no target tensor matches: digests only */
    if ((st = dc_digest_unmatched(&bg, base, used, bdg, threads)) != DC_OK)
        goto out;

    uint64_t frames = 0, frames_bytes = 0;
    size_t nt = dc_st_count(next);
    size_t ti = 0;
    uint64_t ci = 0;
    ss->tensors = nt;
    for (;;) {
        /* fill a batch, in (tensor, chunk) order */
        size_t nj = 0;
        while (nj < batch && ti < nt) {
            const dc_st_tensor_t *t = dc_st_tensor(next, ti);
            unsigned w = (unsigned)dc_dtype_size(t->dtype);
            uint64_t ce = dc_delta_chunk_elems(cs, w);
            if (ci * ce >= t->nelems) {
                ti++;
                ci = 0;
                continue;
            }
            if (ci == 0)
                ss->elements += t->nelems;
            dc_job_t *j = &d.jobs[nj++];
            j->tensor = (uint32_t)ti;
            j->chunk = (uint32_t)ci;
            j->off = ci * ce;
            j->cnt = DC_MIN(ce, t->nelems - j->off);
            j->w = w;
            j->dtype = (uint8_t)t->dtype;
            j->next = dc_st_data(next, t) + j->off * w;
            j->next_dg = &ndg[ng.gstart[ti] + ci];
            if (bidx[ti] != SIZE_MAX) {
                const dc_st_tensor_t *bt = dc_st_tensor(base, bidx[ti]);
                j->base = dc_st_data(base, bt) + j->off * w;
                j->base_dg = &bdg[bg.gstart[bidx[ti]] + ci];
            } else {
                j->base = NULL;
                j->base_dg = NULL;
            }
            ci++;
        }
        if (nj == 0)
            break;
        st = dc_kern_parallel_for(nj, dc_diff_task, &d, threads);
        if (st != DC_OK)
            goto out;
        for (size_t i = 0; i < nj; i++) {
            dc_job_t *j = &d.jobs[i];
            ss->chunks++;
            if (j->base)
                ss->changed += j->st.changed;
            if (!j->emit)
                continue;
            if ((st = dc_groups_add(&grp, sink, ng.gstart[j->tensor] + j->chunk, j)) != DC_OK)
                goto out;
            frames++;
            if (dc_enc_kind(j->enc) == DC_ENC_CTX)
                ss->frames_ctx++;
            else
                ss->frames_by_kind[dc_enc_kind(j->enc)]++;
            ss->payload_bytes += j->len;
            ss->pos_bytes += j->st.pos_bytes;
            ss->val_bytes += j->st.val_bytes;
            if (j->base && j->st.bound_bits >= 0) {
                ss->bound_bytes += j->st.bound_bits / 8.0;
                ss->bound_ctx_bytes += (j->st.ctx_bound_bits >= 0 ? j->st.ctx_bound_bits
                                                                   : j->st.bound_bits) /
                                       8.0;
                ss->bounded_payload += j->len;
            }
        }
    }
    if ((st = dc_groups_flush(&grp, sink)) != DC_OK)
        goto out;
    frames_bytes = grp.bytes;
    dc_digest_t bd, nd;
    if ((st = dc_ckpt_digest_finish(base, cs, bdg, bg.G, &bd)) != DC_OK ||
        (st = dc_ckpt_digest_finish(next, cs, ndg, ng.G, &nd)) != DC_OK)
        goto out;
    ss->frames = frames;
    ss->base_bytes = bsz;
    ss->target_bytes = nsz;
    ss->delta_bytes = DC_DELTA_HEADER_SIZE + S + frames_bytes;
    memcpy(hdr, DC_DELTA_MAGIC, 8);
    dc_store_le32(hdr + 8, DC_DELTA_VERSION);
    dc_store_le32(hdr + 12, flags);
    dc_store_le64(hdr + 100, S);
    dc_store_le64(hdr + 16, cs);
    dc_store_le64(hdr + 24, bsz);
    dc_store_le64(hdr + 32, bd.lo);
    dc_store_le64(hdr + 40, bd.hi);
    dc_store_le64(hdr + 48, nsz);
    dc_store_le64(hdr + 56, nd.lo);
    dc_store_le64(hdr + 64, nd.hi);
    dc_store_le64(hdr + 72, thl);
    dc_store_le64(hdr + 80, frames);
    dc_store_le64(hdr + 88, frames_bytes);
    dc_store_le32(hdr + 96, stored_crc);
    dc_store_le32(hdr + 124, dc_crc32c(0, hdr, 124));
out:
    dc_groups_free(&grp);
    dc_delta_pool_destroy(&d.pool);
    free(d.jobs);
    free(outbuf);
    free(bdg);
    free(ndg);
    free(bidx);
    free(used);
    dc_grid_free(&bg);
    dc_grid_free(&ng);
    return st;
}

/* "dir/.name.tmp.XXXXXX" beside path */
char *dc_delta_tmp_beside(const char *path)
{
    size_t n = strlen(path);
    char *p = malloc(n + 32);
    if (!p)
        return NULL;
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
    memcpy(p, path, dl);
    snprintf(p + dl, n + 32 - dl, ".%s.tmp.XXXXXX", path + dl);
    return p;
}

DC_API dc_status_t dc_delta_diff_files(const char *base_path, const char *next_path,
                                       const char *delta_path, const dc_delta_opts_t *opts,
                                       dc_delta_stats_t *stats)
{
    dc_delta_opts_t o_;
    dc_status_t ast = dc_delta_args(opts, &o_, stats);
    if (ast != DC_OK)
        return ast;
    opts = &o_;
    if (!base_path || !next_path || !delta_path)
        return dc_error(DC_ERR_INVALID, "dc_delta_diff_files: missing path");
    double t0 = dc_now_s();
    dc_st_file_t *b = NULL, *nx = NULL;
    dc_status_t st = dc_st_open(base_path, DC_ST_READ, &b);
    if (st != DC_OK)
        return st;
    st = dc_st_open(next_path, DC_ST_READ, &nx);
    if (st != DC_OK)
        goto out_base;
    char *tmp = dc_delta_tmp_beside(delta_path);
    if (!tmp) {
        st = dc_error(DC_ERR_NOMEM, "path");
        goto out_next;
    }
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "cannot create a file beside '%s'", delta_path);
        goto out_tmp;
    }
    dc_sink_t sink = {.fd = fd, .name = delta_path};
    dc_delta_stats_t ss;
    memset(&ss, 0, sizeof(ss));
    uint8_t hdr[DC_DELTA_HEADER_SIZE];
    st = dc_diff_core(b, nx, opts, &sink, &ss, hdr);
    if (st == DC_OK && pwrite(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr))
        st = dc_error_errno(DC_ERR_IO, errno, "writing '%s'", delta_path);
    if (st == DC_OK && fchmod(fd, 0644) != 0)
        st = dc_error_errno(DC_ERR_IO, errno, "chmod '%s'", delta_path);
    if (st == DC_OK && fsync(fd) != 0)
        st = dc_error_errno(DC_ERR_IO, errno, "fsync '%s'", delta_path);
    if (close(fd) != 0 && st == DC_OK)
        st = dc_error_errno(DC_ERR_IO, errno, "closing '%s'", delta_path);
    if (st == DC_OK && rename(tmp, delta_path) != 0)
        st = dc_error_errno(DC_ERR_IO, errno, "renaming into '%s'", delta_path);
    if (st != DC_OK)
        unlink(tmp);
    if (st == DC_OK) {
        ss.seconds = dc_now_s() - t0;
        dc_delta_stats_out(stats, &ss);
    }
out_tmp:
    free(tmp);
out_next:
    dc_st_close(nx);
out_base:
    dc_st_close(b);
    return st;
}

DC_API dc_status_t dc_delta_diff_buffers(const void *base, size_t base_len, const void *next,
                                         size_t next_len, const dc_delta_opts_t *opts,
                                         void **delta, size_t *delta_len,
                                         dc_delta_stats_t *stats)
{
    dc_delta_opts_t o_;
    dc_status_t ast = dc_delta_args(opts, &o_, stats);
    if (ast != DC_OK)
        return ast;
    opts = &o_;
    if (!base || !next || !delta || !delta_len)
        return dc_error(DC_ERR_INVALID, "dc_delta_diff_buffers: bad arguments");
    double t0 = dc_now_s();
    dc_st_file_t *b = NULL, *nx = NULL;
    dc_status_t st = dc_st_open_mem(base, base_len, "base", &b);
    if (st != DC_OK)
        return st;
    st = dc_st_open_mem(next, next_len, "next", &nx);
    if (st != DC_OK) {
        dc_st_close(b);
        return st;
    }
    dc_sink_t sink = {.fd = -1, .name = "<memory>"};
    dc_delta_stats_t ss;
    memset(&ss, 0, sizeof(ss));
    uint8_t hdr[DC_DELTA_HEADER_SIZE];
    st = dc_diff_core(b, nx, opts, &sink, &ss, hdr);
    dc_st_close(nx);
    dc_st_close(b);
    if (st != DC_OK) {
        free(sink.mem);
        return st;
    }
    memcpy(sink.mem, hdr, sizeof(hdr));
    ss.seconds = dc_now_s() - t0;
    dc_delta_stats_out(stats, &ss);
    *delta = sink.mem;
    *delta_len = sink.len;
    return DC_OK;
}
