/* delta_apply.c - delta files: apply a delta to its base (in memory or
 * file to file), every chunk checked against the target's digests. */
#include "kernels/delta.h"
#include "kernels/delta_internal.h"

#include "kernels/kern.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ======================================================================== */
/*  Apply                                                                   */
/* ======================================================================== */

/* A frame as the reader handed it out (v1 or v2 alike). */
typedef struct {
    const uint8_t *payload;
    dc_frame_hdr_t h;
} dc_apply_frame_t;

typedef struct {
    dc_st_file_t *base, *tgt;
    dc_grid_t tg;
    size_t *bidx;        /* per target tensor: matched base tensor or SIZE_MAX */
    uint8_t *used;       /* per base tensor: matched */
    uint64_t *frame_of;  /* per target chunk: its frame's index + 1; 0 = none */
    dc_apply_frame_t *fr; /* the frames, validated, in file order */
    dc_digest_t *tdg;
    dc_pool_t pool;
    _Atomic uint64_t bad_chunk; /* lowest target chunk whose digest failed + 1 */
} dc_apply_ctx_t;

static void dc_note_bad(dc_apply_ctx_t *a, uint64_t g)
{
    uint64_t cur = atomic_load(&a->bad_chunk);
    while ((cur == 0 || g + 1 < cur) && !atomic_compare_exchange_weak(&a->bad_chunk, &cur, g + 1))
        ;
}

/* One target chunk: copy the base chunk, decode the frame onto it and hash
 * the result, in one pass over the data (dc_codec_decode_digest).  The base
 * is not hashed here: target digests that verify prove the result, and only
 * when one fails does dc_apply_judge hash the base, to tell a wrong base
 * from a corrupt delta.  Digest mismatches are only noted here. */
static dc_status_t dc_apply_task(void *arg, size_t g)
{
    dc_apply_ctx_t *a = arg;
    size_t ti = dc_grid_tensor(&a->tg, g);
    const dc_st_tensor_t *t = dc_st_tensor(a->tgt, ti);
    unsigned w = (unsigned)dc_dtype_size(t->dtype);
    uint64_t ce = dc_delta_chunk_elems(a->tg.cs, w);
    uint64_t ci = g - a->tg.gstart[ti];
    uint64_t off = ci * ce, cnt = DC_MIN(ce, t->nelems - off);
    uint8_t *dst = dc_st_data(a->tgt, t) + off * w;
    const uint8_t *src = NULL;
    if (a->bidx[ti] != SIZE_MAX)
        src = dc_st_data(a->base, dc_st_tensor(a->base, a->bidx[ti])) + off * w;
    if (a->frame_of[g] == 0) {
        /* unchanged: copied and hashed in one pass */
        return dc_kern_patch_digest(dst, src, (size_t)cnt, w, DC_PATCH_COPY, NULL, NULL, 0, NULL,
                                    &a->tdg[g]);
    }
    const dc_frame_hdr_t h = a->fr[a->frame_of[g] - 1].h;
    const uint8_t *payload = a->fr[a->frame_of[g] - 1].payload;
    dc_status_t st;
    if ((st = dc_frame_check_payload(&h, payload, h.payload_len)) != DC_OK) {
        dc_error_prefix("tensor '%s'", t->name);
        return st;
    }
    dc_codec_t *c;
    if ((st = dc_delta_pool_get(&a->pool, &c)) != DC_OK)
        return st;
    /* base copy, decode and target digest in one pass */
    st = dc_codec_decode_digest(c, h.encoding, payload, h.payload_len, src, dst, (size_t)cnt, w,
                                NULL, &a->tdg[g]);
    dc_delta_pool_put(&a->pool, c);
    if (st == DC_ERR_FORMAT && dc_enc_kind(h.encoding) == DC_ENC_CTX) {
        /* a ctx-sparse payload (its CRC good) decodes against the base's
         * classes: on another base it may not decode at all.  Judged like
         * a digest mismatch: wrong base or corrupt delta */
        dc_note_bad(a, g);
        return DC_OK;
    }
    if (st != DC_OK) {
        dc_error_prefix("tensor '%s' chunk %llu", t->name, (unsigned long long)ci);
        return st;
    }
    /* a record without a digest is checked by the target checkpoint digest */
    if (!h.no_digest && !dc_digest_eq(a->tdg[g], h.target_digest))
        dc_note_bad(a, g);
    return DC_OK;
}

/* Hash the whole base: DC_OK when its checkpoint digest is the one the
 * delta names, else DC_ERR_WRONG_BASE (`note` ends the message). */
static dc_status_t dc_apply_check_base(const dc_st_file_t *base, const dc_delta_info_t *in,
                                       unsigned threads, const char *note)
{
    dc_digest_t bd;
    dc_status_t st = dc_ckpt_digest(base, in->chunk_size, threads, &bd);
    if (st != DC_OK)
        return st;
    if (!dc_digest_eq(bd, in->base_digest))
        return dc_error(DC_ERR_WRONG_BASE,
                        "base checkpoint digest does not match the delta's: the delta was "
                        "made for a different base%s",
                        note);
    return DC_OK;
}

/* A target digest failed (`what`): hash the base now (the fast path never
 * does) to say which of the two it is: DC_ERR_WRONG_BASE when the base's
 * checkpoint digest is not the one the delta names, else DC_ERR_VERIFY. */
static dc_status_t dc_apply_judge(const dc_st_file_t *base, const dc_delta_info_t *in,
                                  unsigned threads, const char *what)
{
    dc_status_t st = dc_apply_check_base(base, in, threads, "");
    if (st != DC_OK)
        return st;
    return dc_error(DC_ERR_VERIFY, "%s on the delta's own base: the delta is corrupt", what);
}

/* Apply a validated reader's delta onto `out` (target_size bytes). */
static dc_status_t dc_apply_core(dc_st_file_t *base, dc_delta_reader_t *r, uint8_t *out,
                                 unsigned threads, int strict, dc_delta_stats_t *ss)
{
    const dc_delta_info_t *in = &r->info;
    uint64_t bsz = dc_st_file_size(base);
    if (bsz != in->base_size)
        return dc_error(DC_ERR_WRONG_BASE,
                        "delta was made for a base of %llu bytes, this base has %llu",
                        (unsigned long long)in->base_size, (unsigned long long)bsz);
    if (strict) {
        dc_status_t sst = dc_apply_check_base(base, in, threads, " (strict base check)");
        if (sst != DC_OK)
            return sst;
    }
    memcpy(out, r->target_header, in->target_header_len);
    dc_apply_ctx_t a;
    memset(&a, 0, sizeof(a));
    atomic_init(&a.bad_chunk, 0);
    dc_delta_pool_init(&a.pool, (size_t)in->chunk_size);
    dc_status_t st = dc_st_open_mem(out, in->target_size, "delta target", &a.tgt);
    if (st != DC_OK) {
        st = st == DC_ERR_NOMEM ? st : DC_ERR_FORMAT;
        goto out;
    }
    size_t hl;
    dc_st_header_raw(a.tgt, &hl);
    if (hl != in->target_header_len) {
        st = dc_error(DC_ERR_FORMAT, "delta target header length mismatch");
        goto out;
    }
    a.base = base;
    /* codec contexts as large as the target's largest chunk, not as the
     * header's chunk_size claims (a 500-byte delta claiming 128 MiB chunks
     * made every context allocate and clear for them) */
    a.pool.max_bytes = (size_t)dc_delta_max_chunk_bytes(a.tgt, in->chunk_size);
    if ((st = dc_grid_init(&a.tg, a.tgt, in->chunk_size)) != DC_OK ||
        (st = dc_delta_match(base, a.tgt, &a.bidx, &a.used)) != DC_OK)
        goto out;
    uint64_t G = a.tg.G;
    size_t nt = a.tg.nt;
    for (size_t i = 0; i < nt; i++)
        ss->elements += dc_st_tensor(a.tgt, i)->nelems;
    ss->tensors = nt;
    ss->chunks = G;
    a.frame_of = calloc(G + 1, sizeof(uint64_t));
    a.tdg = malloc(sizeof(dc_digest_t) * (G + 1));
    /* the header's frame count is bounded by the file size (reader init) */
    a.fr = malloc(sizeof(*a.fr) * (size_t)(DC_MIN(in->frame_count, G) + 1));
    if (!a.frame_of || !a.tdg || !a.fr) {
        st = dc_error(DC_ERR_NOMEM, "apply chunk tables (%llu chunks)", (unsigned long long)G);
        goto out;
    }
    for (;;) {
        dc_frame_hdr_t h;
        const uint8_t *payload;
        int done;
        if ((st = dc_delta_reader_next(r, &h, &payload, &done)) != DC_OK)
            goto out;
        if (done)
            break;
        if (h.tensor_id >= nt) {
            st = dc_error(DC_ERR_FORMAT, "frame names tensor %u of %zu", h.tensor_id, nt);
            goto out;
        }
        const dc_st_tensor_t *t = dc_st_tensor(a.tgt, h.tensor_id);
        unsigned w = (unsigned)dc_dtype_size(t->dtype);
        uint64_t ce = dc_delta_chunk_elems(in->chunk_size, w);
        uint64_t nch = a.tg.gstart[h.tensor_id + 1] - a.tg.gstart[h.tensor_id];
        if (h.dtype != t->dtype || h.chunk_index >= nch || h.elem_offset != h.chunk_index * ce ||
            h.elem_count != DC_MIN(ce, t->nelems - h.elem_offset)) {
            st = dc_error(DC_ERR_FORMAT, "frame for tensor '%s' chunk %u does not fit its layout",
                          t->name, h.chunk_index);
            goto out;
        }
        uint64_t g = a.tg.gstart[h.tensor_id] + h.chunk_index;
        if (a.frame_of[g]) {
            st = dc_error(DC_ERR_FORMAT, "duplicate frame for tensor '%s' chunk %u", t->name,
                          h.chunk_index);
            goto out;
        }
        if (dc_enc_needs_base(dc_enc_kind(h.encoding)) && a.bidx[h.tensor_id] == SIZE_MAX) {
            st = dc_error(DC_ERR_FORMAT, "frame for tensor '%s' needs a base tensor the base lacks",
                          t->name);
            goto out;
        }
        if (ss->frames >= G) { /* a duplicate is refused above: not reached */
            st = dc_error(DC_ERR_FORMAT, "delta holds more frames than the target has chunks");
            goto out;
        }
        a.fr[ss->frames] = (dc_apply_frame_t){payload, h};
        a.frame_of[g] = ss->frames + 1;
        ss->frames++;
        if (dc_enc_kind(h.encoding) == DC_ENC_CTX)
            ss->frames_ctx++;
        else
            ss->frames_by_kind[dc_enc_kind(h.encoding)]++;
        ss->payload_bytes += h.payload_len;
    }
    for (size_t i = 0; i < nt; i++) {
        if (a.bidx[i] != SIZE_MAX)
            continue;
        for (uint64_t g = a.tg.gstart[i]; g < a.tg.gstart[i + 1]; g++)
            if (!a.frame_of[g]) {
                st = dc_error(DC_ERR_FORMAT, "delta lacks chunk %llu of new tensor '%s'",
                              (unsigned long long)(g - a.tg.gstart[i]),
                              dc_st_tensor(a.tgt, i)->name);
                goto out;
            }
    }
    if ((st = dc_kern_parallel_for((size_t)G, dc_apply_task, &a, threads)) != DC_OK)
        goto out;
    uint64_t bad = atomic_load(&a.bad_chunk);
    if (bad) {
        size_t ti = dc_grid_tensor(&a.tg, bad - 1);
        char what[512];
        snprintf(what, sizeof(what), "tensor '%s' chunk %llu: target digest mismatch",
                 dc_st_tensor(a.tgt, ti)->name, (unsigned long long)(bad - 1 - a.tg.gstart[ti]));
        st = dc_apply_judge(base, in, threads, what);
        goto out;
    }
    dc_digest_t td;
    if ((st = dc_ckpt_digest_finish(a.tgt, in->chunk_size, a.tdg, G, &td)) != DC_OK)
        goto out;
    if (!dc_digest_eq(td, in->target_digest)) {
        st = dc_apply_judge(base, in, threads, "target checkpoint digest mismatch after apply");
        goto out;
    }
    ss->base_bytes = bsz;
    ss->target_bytes = in->target_size;
    ss->delta_bytes = r->len;
out:
    dc_delta_pool_destroy(&a.pool);
    free(a.frame_of);
    free(a.fr);
    free(a.tdg);
    free(a.bidx);
    free(a.used);
    dc_grid_free(&a.tg);
    dc_st_close(a.tgt);
    return st;
}

DC_API dc_status_t dc_delta_target_size(const void *delta, size_t delta_len, uint64_t *size)
{
    if (!delta || !size)
        return dc_error(DC_ERR_INVALID, "dc_delta_target_size: bad arguments");
    dc_delta_reader_t r;
    dc_status_t st = dc_delta_reader_init(&r, delta, delta_len);
    if (st == DC_OK)
        *size = r.info.target_size;
    dc_delta_reader_free(&r);
    return st;
}

DC_API dc_status_t dc_delta_apply_buffers(const void *base, size_t base_len, const void *delta,
                                          size_t delta_len, const dc_delta_opts_t *opts, void *out,
                                          size_t out_cap, size_t *out_len, dc_delta_stats_t *stats)
{
    dc_delta_opts_t o_;
    dc_status_t ast = dc_delta_args(opts, &o_, stats);
    if (ast != DC_OK)
        return ast;
    opts = &o_;
    if (!base || !delta || !out || !out_len)
        return dc_error(DC_ERR_INVALID, "dc_delta_apply_buffers: bad arguments");
    double t0 = dc_now_s();
    dc_st_file_t *b;
    dc_status_t st;
    if ((st = dc_st_open_mem(base, base_len, "base", &b)) != DC_OK)
        return st;
    dc_delta_reader_t r;
    if ((st = dc_delta_reader_init_base(&r, delta, delta_len, b)) != DC_OK)
        goto done;
    if (r.info.target_size > out_cap) {
        st = dc_error(DC_ERR_INVALID,
                      "output buffer of %zu bytes is smaller than the %llu-byte target", out_cap,
                      (unsigned long long)r.info.target_size);
        goto done;
    }
    dc_delta_stats_t ss;
    memset(&ss, 0, sizeof(ss));
    st = dc_apply_core(b, &r, out, dc_delta_opts_threads(opts), dc_delta_opts_strict(opts), &ss);
done:
    dc_delta_reader_free(&r);
    dc_st_close(b);
    if (st != DC_OK)
        return st;
    ss.seconds = dc_now_s() - t0;
    dc_delta_stats_out(stats, &ss);
    *out_len = (size_t)r.info.target_size;
    return DC_OK;
}

DC_API dc_status_t dc_delta_apply_files(const char *base_path, const char *delta_path,
                                        const char *out_path, const dc_delta_opts_t *opts,
                                        dc_delta_stats_t *stats)
{
    dc_delta_opts_t o_;
    dc_status_t ast = dc_delta_args(opts, &o_, stats);
    if (ast != DC_OK)
        return ast;
    opts = &o_;
    if (!base_path || !delta_path)
        return dc_error(DC_ERR_INVALID, "dc_delta_apply_files: missing path");
    const char *dest = out_path ? out_path : base_path;
    double t0 = dc_now_s();
    dc_status_t st;
    int dfd = open(delta_path, O_RDONLY | O_CLOEXEC);
    if (dfd < 0)
        return dc_error_errno(DC_ERR_IO, errno, "cannot open '%s'", delta_path);
    struct stat sb;
    if (dc_fstat(dfd, &sb) != 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "stat '%s'", delta_path);
        close(dfd);
        return st;
    }
    if (!S_ISREG(sb.st_mode) || sb.st_size < DC_DELTA_HEADER_SIZE) {
        close(dfd);
        return dc_error(DC_ERR_FORMAT, "'%s' is not a delta file (%lld bytes)", delta_path,
                        (long long)sb.st_size);
    }
    size_t dlen = (size_t)sb.st_size;
    void *dmap = NULL;
    st = dc_file_map_read(dfd, delta_path, dlen, 0, &dmap);
    close(dfd);
    if (st != DC_OK)
        return st;
    dc_delta_reader_t r;
    dc_st_file_t *b = NULL;
    char *tmp = NULL;
    int ofd = -1;
    void *omap = MAP_FAILED;
    size_t osz = 0;
    memset(&r, 0, sizeof(r));
    if ((st = dc_st_open(base_path, DC_ST_READ, &b)) != DC_OK)
        goto out_delta;
    if ((st = dc_delta_reader_init_base(&r, dmap, dlen, b)) != DC_OK) {
        dc_error_prefix("%s", delta_path);
        goto out_base;
    }
    {
        /* validate the target layout before reserving space for it */
        dc_st_file_t *lay;
        void *lmap;
        if ((st = dc_delta_layout(&r, &lay, &lmap)) != DC_OK) {
            dc_error_prefix("%s", delta_path);
            goto out_base;
        }
        dc_st_close(lay);
        dc_delta_layout_free(&r, lmap);
    }
    tmp = dc_delta_tmp_beside(dest);
    if (!tmp) {
        st = dc_error(DC_ERR_NOMEM, "path");
        goto out_base;
    }
    ofd = mkstemp(tmp);
    if (ofd < 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "cannot create a file beside '%s'", dest);
        goto out_base;
    }
    osz = (size_t)r.info.target_size;
    /* reserve the blocks now: a full disk is an error here, not a SIGBUS
     * when the mapping is written (where the file system has no fallocate,
     * the file's holes are written with zeros, each write checked) */
    if (ftruncate(ofd, (off_t)osz) != 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "cannot size '%s' (for '%s') to %zu bytes", tmp, dest,
                            osz);
        goto out_tmp;
    }
    if ((st = dc_file_reserve(ofd, tmp, osz)) != DC_OK) {
        dc_error_prefix("writing '%s'", dest);
        goto out_tmp;
    }
    omap = mmap(NULL, osz, PROT_READ | PROT_WRITE, MAP_SHARED, ofd, 0);
    if (omap == MAP_FAILED) {
        st = dc_error_errno(DC_ERR_IO, errno, "cannot map '%s'", tmp);
        goto out_tmp;
    }
    dc_file_map_note(omap, osz, tmp);
    dc_delta_stats_t ss;
    memset(&ss, 0, sizeof(ss));
    st = dc_apply_core(b, &r, omap, dc_delta_opts_threads(opts), dc_delta_opts_strict(opts), &ss);
    if (st != DC_OK) {
        dc_error_prefix("applying '%s' to '%s'", delta_path, base_path);
        goto out_tmp;
    }
    if (msync(omap, osz, MS_SYNC) != 0 || fsync(ofd) != 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "syncing '%s'", tmp);
        goto out_tmp;
    }
    if (fchmod(ofd, 0644) != 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "chmod '%s'", tmp);
        goto out_tmp;
    }
    if (rename(tmp, dest) != 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "renaming into '%s'", dest);
        goto out_tmp;
    }
    ss.seconds = dc_now_s() - t0;
    dc_delta_stats_out(stats, &ss);
out_tmp:
    if (omap != MAP_FAILED) {
        dc_file_map_forget(omap);
        munmap(omap, osz);
    }
    if (ofd >= 0)
        close(ofd);
    if (st != DC_OK)
        unlink(tmp);
out_base:
    free(tmp);
    dc_delta_reader_free(&r);
    dc_st_close(b);
out_delta:
    munmap(dmap, dlen);
    return st;
}
