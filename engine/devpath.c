/* devpath.c - device-side apply for receivers in device memory (devpath.h). */
#include "engine/devpath.h"

#include "engine/devdense.h"
#include "kernels/entropy.h"
#include "kernels/kern_cuda.h"

#include <stdlib.h>
#include <string.h>

enum {
    DEV_WHY_CTX_UNDO,
    DEV_WHY_PUT_SPARSE,
    DEV_WHY_SPANS,
    DEV_WHY_LISTS,
    DEV_WHY_UNDO_COPY,
    DEV_WHY_N
};

static const char *const dev_why[DEV_WHY_N] = {
    "no device memory for a ctx chunk's undo record (the host path keeps one)",
    "no device memory for a put-sparse chunk's undo record (the host path keeps one)",
    "the chunk spans several placement segments",
    "its position/word lists are not smaller than staging the chunk",
    "no device memory for a put-dense chunk's undo copy of its old bytes",
};

struct dc_devpath {
    void *dbuf; /* device scratch: positions then words */
    size_t dbuf_cap;
    uint64_t dev_chunks, dev_bytes; /* applied on the device, bytes sent there */
    uint64_t staged[DEV_WHY_N];
    uint64_t undone;
    uint64_t dev_values;    /* xor-sparse chunks whose values were decoded on the device */
    uint64_t dev_positions; /* ... and their positions too */
    uint64_t dev_ctx;       /* ctx-sparse chunks decoded and applied on the device */
    uint64_t ctx_gaps_classes; /* ... their rANS gaps classes (decoded on the device) */
    uint64_t ctx_host_classes; /* ... their classes whose (gaps) ranks were decoded on the host */
    uint64_t ctx_host_values;  /* ... those whose (zstd) values were decoded on the host */
    dc_kern_cuda_ctx_t *ctx;   /* the ctx decoder's scratch */
    size_t ctx_max;
    /* undo records of ctx chunks applied on the device (their positions
     * then XOR words, in device memory: a ctx frame does not undo itself),
     * per chunk; `pend` is the one of the chunk being applied until its
     * digest is checked */
    void **undo;
    size_t *undo_count;
    uint8_t *undo_copy; /* the record is a put-dense chunk's copy of its old bytes */
    void *pend;
    size_t pend_count;
    int pend_copy;
    dc_devdense_t dd; /* the dense and put kinds (devdense.c) */
};

static struct {
    _Atomic uint64_t frames, payload, dev_ctx, staged_ctx, undone_ctx, dev_gaps;
    _Atomic uint64_t dev_dense, dev_put_sparse, host_zstd, dev_copies, undone_rec, staged;
} dev_totals;

void dc_devpath_totals(dc_devpath_totals_t *t)
{
    t->frames = dev_totals.frames;
    t->payload_bytes = dev_totals.payload;
    t->dev_ctx = dev_totals.dev_ctx;
    t->staged_ctx = dev_totals.staged_ctx;
    t->undone_ctx = dev_totals.undone_ctx;
    t->dev_gaps = dev_totals.dev_gaps;
    t->dev_dense = dev_totals.dev_dense;
    t->dev_put_sparse = dev_totals.dev_put_sparse;
    t->host_zstd = dev_totals.host_zstd;
    t->dev_copies = dev_totals.dev_copies;
    t->undone_rec = dev_totals.undone_rec;
    t->staged = dev_totals.staged;
}

_Thread_local int dc_devpath_force_stage;

dc_status_t dc_devpath_open(dc_node_t *n)
{
    const char *knob = dc_config_get("device_apply");
    if (knob && *knob && strcmp(knob, "stage") != 0 && strcmp(knob, "device") != 0)
        return dc_error(DC_ERR_INVALID, "node %u: device_apply '%s' is not device or stage", n->me,
                        knob);
    if (dc_devpath_force_stage || (knob && strcmp(knob, "stage") == 0)) {
        DC_LOG_WARN("node %u: weights in device memory, device apply off (%s): every chunk "
                    "is staged through the host (whole chunk across PCIe both ways)",
                    n->me, dc_devpath_force_stage ? "forced by the caller" : "device_apply=stage");
        return DC_OK;
    }
    n->rx.dev = calloc(1, sizeof(*n->rx.dev));
    uint32_t nch = n->layout ? n->layout->nchunks : 0;
    if (n->rx.dev) {
        n->rx.dev->undo = calloc(nch ? nch : 1, sizeof(void *));
        n->rx.dev->undo_count = calloc(nch ? nch : 1, sizeof(size_t));
        n->rx.dev->undo_copy = calloc(nch ? nch : 1, 1);
    }
    if (!n->rx.dev || !n->rx.dev->undo || !n->rx.dev->undo_count || !n->rx.dev->undo_copy) {
        if (n->rx.dev) {
            free(n->rx.dev->undo);
            free(n->rx.dev->undo_count);
            free(n->rx.dev->undo_copy);
        }
        free(n->rx.dev);
        n->rx.dev = NULL;
        return dc_error(DC_ERR_NOMEM, "node %u: out of memory", n->me);
    }
    DC_LOG_INFO("node %u: weights in device memory: every chunk kind is applied and "
                "digested on the device (the sparse kinds' Golomb and rANS gaps positions and "
                "every kind's raw, rANS and byte-planes values decoded on the device from the "
                "compact streams, zstd values on the host; ctx's classes from the baseline on "
                "the device; undo records and put-dense undo copies in device memory)",
                n->me);
    return DC_OK;
}

void dc_devpath_close(dc_node_t *n)
{
    struct dc_devpath *dp = n->rx.dev;
    if (!dp)
        return;
    uint64_t staged = 0;
    for (int i = 0; i < DEV_WHY_N; i++)
        staged += dp->staged[i];
    DC_LOG_INFO("node %u: device path: %llu chunks applied on the device (%llu bytes sent "
                "there; xor-sparse: values decoded there for %llu, positions for %llu; "
                "ctx-sparse %llu, with %llu gaps classes decoded there, %llu classes' gaps "
                "ranks and %llu chunks' zstd values decoded on the host; dense kinds' values "
                "decoded there %llu; put-sparse %llu; dense and put-sparse zstd values "
                "decoded on the host %llu; put-dense undo copies made there %llu), %llu undone "
                "there, %llu staged through the "
                "host (no memory for a ctx undo record %llu, a put-sparse undo record %llu, "
                "spanning segments %llu, lists too large %llu, a put-dense undo copy %llu)",
                n->me, (unsigned long long)dp->dev_chunks, (unsigned long long)dp->dev_bytes,
                (unsigned long long)dp->dev_values, (unsigned long long)dp->dev_positions,
                (unsigned long long)dp->dev_ctx, (unsigned long long)dp->ctx_gaps_classes,
                (unsigned long long)dp->ctx_host_classes,
                (unsigned long long)dp->ctx_host_values, (unsigned long long)dp->dd.dense_dev,
                (unsigned long long)dp->dd.put_sparse, (unsigned long long)dp->dd.host_zstd,
                (unsigned long long)dp->dd.copies, (unsigned long long)dp->undone,
                (unsigned long long)staged,
                (unsigned long long)dp->staged[DEV_WHY_CTX_UNDO],
                (unsigned long long)dp->staged[DEV_WHY_PUT_SPARSE],
                (unsigned long long)dp->staged[DEV_WHY_SPANS],
                (unsigned long long)dp->staged[DEV_WHY_LISTS],
                (unsigned long long)dp->staged[DEV_WHY_UNDO_COPY]);
    dc_devpath_forget(n);
    dc_kern_cuda_free(dp->pend);
    dc_kern_cuda_ctx_free(dp->ctx);
    dc_kern_cuda_free(dp->dbuf);
    dc_devdense_close(&dp->dd);
    free(dp->undo);
    free(dp->undo_count);
    free(dp->undo_copy);
    free(dp);
    n->rx.dev = NULL;
}

/* the undo record of a ctx chunk without changes (nothing to undo) */
static char dev_undo_none;

static void dev_undo_drop(struct dc_devpath *dp, uint32_t c)
{
    if (!dp->undo[c])
        return;
    if (dp->undo[c] != &dev_undo_none)
        dc_kern_cuda_free(dp->undo[c]);
    dp->undo[c] = NULL;
    dp->undo_count[c] = 0;
    dp->undo_copy[c] = 0;
}

void dc_devpath_forget(dc_node_t *n)
{
    struct dc_devpath *dp = n->rx.dev;
    if (!dp || !n->layout)
        return;
    for (uint32_t c = 0; c < n->layout->nchunks; c++)
        dev_undo_drop(dp, c);
}

void dc_devpath_drop_undo(dc_node_t *n, uint32_t c)
{
    if (!n->rx.dev->undo_copy[c]) /* (a baseline copy still undoes the chunk) */
        dev_undo_drop(n->rx.dev, c);
}

int dc_devpath_has_undo(const dc_node_t *n, uint32_t c)
{
    return n->rx.dev && n->rx.dev->undo[c] != NULL;
}

int dc_devpath_has_copy(const dc_node_t *n, uint32_t c)
{
    return n->rx.dev && n->rx.dev->undo[c] != NULL && n->rx.dev->undo_copy[c];
}

/* Staging for reason `why`: counted, and said the first time per node. */
static int dev_stage(dc_node_t *n, uint32_t c, int why)
{
    if (why == DEV_WHY_CTX_UNDO)
        dev_totals.staged_ctx++;
    dev_totals.staged++;
    if (n->rx.dev->staged[why]++ == 0)
        DC_LOG_WARN("node %u: chunk %u staged through the host (whole chunk across PCIe "
                    "both ways): %s; further chunks for this reason are counted, not logged",
                    n->me, c, dev_why[why]);
    return DC_DEV_STAGE;
}

static dc_status_t dev_scratch(struct dc_devpath *dp, size_t bytes)
{
    if (dp->dbuf_cap >= bytes)
        return DC_OK;
    dc_kern_cuda_free(dp->dbuf);
    dp->dbuf = NULL;
    dp->dbuf_cap = 0;
    dc_status_t st = dc_kern_cuda_malloc(&dp->dbuf, bytes);
    if (st == DC_OK)
        dp->dbuf_cap = bytes;
    return st;
}

/* The ctx / gaps decoder's scratch for chunks of `bytes`. */
static dc_status_t dev_ctx_scratch(struct dc_devpath *dp, size_t bytes)
{
    if (dp->ctx && dp->ctx_max >= bytes)
        return DC_OK;
    dc_kern_cuda_ctx_free(dp->ctx);
    dp->ctx = NULL;
    dp->ctx_max = 0;
    dc_status_t st = dc_kern_cuda_ctx_create(bytes, &dp->ctx);
    if (st == DC_OK)
        dp->ctx_max = bytes;
    return st;
}

enum { DEV_HOST_VALUES = -1 };

/* PUT_SPARSE: its count new words (device, dwords) at the positions dpos
 * (device, accepted by a positions decoder) made XOR words against the
 * chunk (devdense.c), and with keep_undo its device undo record into
 * dp->pend (staged when there is no memory for it).  Nothing is written
 * to the chunk.  Returns DC_DEV_DONE, DC_DEV_STAGE or DC_DEV_FAIL. */
static int dev_put_words(dc_node_t *n, uint32_t c, const uint8_t *dchunk, size_t w,
                         const uint32_t *dpos, uint8_t *dwords, size_t count, int keep_undo)
{
    struct dc_devpath *dp = n->rx.dev;
    void *rec = NULL;
    dc_kern_cuda_free(dp->pend);
    dp->pend = NULL;
    dp->pend_count = 0;
    dp->pend_copy = 0;
    dc_status_t st = dc_devdense_put_to_xor(&dp->dd, dchunk, (unsigned)w, dpos, dwords, count,
                                            keep_undo ? &rec : NULL);
    if (st == DC_ERR_NOMEM && keep_undo)
        return dev_stage(n, c, DEV_WHY_PUT_SPARSE);
    if (st != DC_OK)
        return DC_DEV_FAIL;
    dp->pend = rec;
    dp->pend_count = rec ? count : 0;
    dev_totals.dev_put_sparse++;
    return DC_DEV_DONE;
}

/* An xor-sparse or put-sparse payload: positions decoded on the device
 * (or, gaps in chunks of more than 2^31 elements, on the host), the compact
 * values stream sent as it is and decoded on the device
 * (dc_kern_cuda_values_decode, the CPU decoder's verdict), put-sparse's
 * new words made XOR words (dev_put_words; keep_undo: its device undo
 * record), then dc_kern_cuda_xor_scatter.  Everything before the scatter writes only
 * scratch, so a refused payload leaves the chunk untouched.  Returns
 * DC_DEV_*, or DEV_HOST_VALUES for zstd values (no device decoder: the
 * caller decodes the values on the host). */
static int dev_sparse(dc_node_t *n, uint32_t c, uint16_t enc, const uint8_t *payload,
                      size_t len, int journal, uint8_t *dchunk, size_t elems, size_t w,
                      int keep_undo)
{
    struct dc_devpath *dp = n->rx.dev;
    const dc_layout_chunk_t *lc = &n->layout->chunks[c];
    const dc_layout_tensor_t *lt = &n->layout->tensors[lc->tensor];
    unsigned vm = dc_enc_val_method(enc);
    /* positions are decoded on the device too (their stream and the
     * values stream, contiguous in the payload, cross as they are): Golomb
     * (dc_kern_cuda_golomb_decode) and rANS gaps (dc_kern_cuda_gaps_decode:
     * header and escapes read here) */
    const int gaps = dc_enc_pos_method(enc) == DC_ENT_GAPS;
    const int dev_pos = !gaps || elems <= (1ull << 31);
    /* zstd values (no device decoder): the whole payload decoded on the
     * host (its verdict), the words coded again as a stream the device
     * decodes (devdense.c), which crosses instead of the zstd stream; the
     * positions stream still crosses as it is */
    const uint8_t *vsrc = NULL;
    size_t rlen = 0;
    if (vm == DC_ENT_ZSTD) {
        if (!dev_pos)
            return DEV_HOST_VALUES;
        const uint32_t *hp;
        const uint8_t *hw;
        size_t hc;
        if (dc_codec_decode_lists(n->rx.codec, enc, payload, len, elems, (unsigned)w, &hp, &hw,
                                  &hc) != DC_OK)
            return DC_DEV_BAD; /* nothing changed yet */
        if (dc_devdense_recode(n, &dp->dd, hw, hc, (unsigned)w, &vsrc, &rlen, &vm) != DC_OK) {
            dc_error_prefix("node %u: chunk %u of tensor '%s'", n->me, c, lt->name);
            return DC_DEV_FAIL;
        }
        dev_totals.host_zstd++;
    }
    if (gaps && dev_pos && dev_ctx_scratch(dp, lc->len) != DC_OK) {
        dc_error_prefix("node %u: chunk %u of tensor '%s' in device memory", n->me, c, lt->name);
        return DC_DEV_FAIL;
    }
    const uint32_t *pos = NULL;
    size_t count, pofs, plen = 0, vofs;
    if (dev_pos) {
        if (dc_codec_sparse_header(n->rx.codec, enc, payload, len, elems, (unsigned)w, &count,
                                   &pofs, &plen) != DC_OK)
            return DC_DEV_BAD; /* nothing changed yet */
        vofs = pofs + plen;
    } else if (dc_codec_decode_positions(n->rx.codec, enc, payload, len, elems, (unsigned)w,
                                         &pos, &count, &vofs) != DC_OK) {
        return DC_DEV_BAD;
    }
    const size_t pos_bytes = count * sizeof(uint32_t), vlen = vsrc ? rlen : len - vofs;
    const size_t sent = (dev_pos ? plen : pos_bytes) + vlen;
    if (sent >= 2 * (size_t)lc->len)
        return dev_stage(n, c, DEV_WHY_LISTS);
    /* scratch: positions | decoded words | [the positions stream] the
     * values stream */
    const size_t wofs = (pos_bytes + 15) & ~(size_t)15;
    const size_t sofs = (wofs + count * w + 15) & ~(size_t)15;
    dc_status_t st;
    if ((st = dev_scratch(dp, sofs + plen + vlen)) != DC_OK)
        goto fail;
    uint64_t gaps_sent = 0;
    if (dev_pos) {
        if (vsrc ? (((!gaps && plen) && (st = dc_kern_cuda_h2d((uint8_t *)dp->dbuf + sofs,
                                                               payload + pofs, plen)) != DC_OK) ||
                    (vlen && (st = dc_kern_cuda_h2d((uint8_t *)dp->dbuf + sofs + plen, vsrc,
                                                    vlen)) != DC_OK))
                 : (st = dc_kern_cuda_h2d((uint8_t *)dp->dbuf + sofs + (gaps ? plen : 0),
                                          payload + pofs + (gaps ? plen : 0),
                                          (gaps ? 0 : plen) + vlen)) != DC_OK)
            goto fail;
        st = gaps ? dc_kern_cuda_gaps_decode(dp->ctx, payload + pofs, plen, count, elems,
                                             dp->dbuf, &gaps_sent)
                  : dc_kern_cuda_golomb_decode((uint8_t *)dp->dbuf + sofs, plen, count, elems,
                                               dp->dbuf, NULL);
        if (st == DC_ERR_FORMAT) {
            dc_error_prefix("node %u: chunk %u of tensor '%s': positions decoded on the device",
                            n->me, c, lt->name);
            return DC_DEV_BAD; /* only scratch was written */
        }
        if (st != DC_OK)
            goto fail;
    } else if ((count && (st = dc_kern_cuda_h2d(dp->dbuf, pos, pos_bytes)) != DC_OK) ||
               (vlen && (st = dc_kern_cuda_h2d((uint8_t *)dp->dbuf + sofs, payload + vofs,
                                               vlen)) != DC_OK)) {
        goto fail;
    }
    st = dc_kern_cuda_values_decode(vm, (uint8_t *)dp->dbuf + sofs + plen, vlen, count,
                                    (unsigned)w, (uint8_t *)dp->dbuf + wofs, NULL);
    if (st == DC_ERR_FORMAT) {
        dc_error_prefix("node %u: chunk %u of tensor '%s': values decoded on the device", n->me,
                        c, lt->name);
        return DC_DEV_BAD; /* only scratch was written */
    }
    if (st != DC_OK)
        goto fail;
    if (dc_enc_kind(enc) == DC_ENC_PUT_SPARSE) {
        int r = dev_put_words(n, c, dchunk, w, dp->dbuf, (uint8_t *)dp->dbuf + wofs, count,
                              keep_undo);
        if (r != DC_DEV_DONE)
            return r == DC_DEV_FAIL ? (dc_error_prefix("node %u: chunk %u of tensor '%s' in "
                                                       "device memory", n->me, c, lt->name),
                                       DC_DEV_FAIL)
                                    : r;
    }
    if (journal && dc_journal_begin(n->rx.j, c) != DC_OK)
        return DC_DEV_FAIL;
    if (count) {
        st = dc_kern_cuda_xor_scatter(dchunk, elems, (unsigned)w, dp->dbuf,
                                      (uint8_t *)dp->dbuf + wofs, count, NULL);
        if (st == DC_ERR_FORMAT)
            return DC_DEV_BAD; /* validated before any write: untouched */
        if (st != DC_OK)
            goto fail;
    }
    dp->dev_bytes += gaps ? gaps_sent + vlen : sent;
    if (gaps && dev_pos)
        dev_totals.dev_gaps++;
    dp->dev_values++;
    dp->dev_positions += dev_pos;
    return DC_DEV_DONE;
fail:
    dc_error_prefix("node %u: chunk %u of tensor '%s' in device memory", n->me, c, lt->name);
    return DC_DEV_FAIL;
}

/* Where a ctx undo record keeps its XOR words after its positions. */
static size_t dev_undo_wofs(size_t count)
{
    return dc_devdense_undo_wofs(count);
}

/* A ctx-sparse payload decoded and applied on the device
 * (dc_kern_cuda_ctx_*): its header parsed here, the class streams (Golomb
 * or rANS gaps) and the values stream sent as they are (zstd words decoded
 * here and sent), the classes counted from the baseline on the device, the
 * chunk patched in place only once every stream and rank was accepted.
 * keep_undo: the positions and XOR words go to a device undo record
 * (dp->pend, kept by dc_devpath_frame once the digest matches), as the host
 * path keeps its xor-sparse undo frame. */
static int dev_ctx(dc_node_t *n, uint32_t c, uint16_t enc, const uint8_t *payload, size_t len,
                   int journal, uint8_t *dchunk, size_t elems, size_t w, int keep_undo)
{
    struct dc_devpath *dp = n->rx.dev;
    const dc_layout_chunk_t *lc = &n->layout->chunks[c];
    const dc_layout_tensor_t *lt = &n->layout->tensors[lc->tensor];
    const unsigned vm = dc_enc_val_method(enc);
    dc_kern_cuda_ctx_hdr_t h;
    dc_status_t st;
    if (dc_enc_pos_method(enc) != 0 || vm >= DC_ENT_GOLOMB) {
        (void)dc_error(DC_ERR_FORMAT, "node %u: chunk %u of tensor '%s': bad ctx chunk encoding "
                 "0x%04x", n->me, c, lt->name, enc);
        return DC_DEV_BAD;
    }
    if (dc_kern_cuda_ctx_parse(payload, len, elems, (unsigned)w, &h) != DC_OK) {
        dc_error_prefix("node %u: chunk %u of tensor '%s'", n->me, c, lt->name);
        return DC_DEV_BAD; /* nothing changed yet */
    }
    /* what crosses: the streams (a gaps class's escapes as 8-byte sums:
     * rare), zstd words decoded here */
    size_t sent = vm == DC_ENT_ZSTD ? h.total * w : h.vlen;
    for (unsigned k = 0; k < h.spec.K; k++)
        sent += (h.gmask >> k & 1) && elems > (1ull << 31)
                    ? (h.spec.off[k + 1] - h.spec.off[k]) * sizeof(uint32_t)
                    : h.plen[k];
    if (sent >= 2 * (size_t)lc->len)
        return dev_stage(n, c, DEV_WHY_LISTS);
    if ((st = dev_ctx_scratch(dp, lc->len)) != DC_OK)
        goto fail;
    uint32_t *upos = NULL;
    uint8_t *uxor = NULL;
    dc_kern_cuda_free(dp->pend);
    dp->pend = NULL;
    dp->pend_count = 0;
    dp->pend_copy = 0;
    if (keep_undo && h.total) {
        if (dc_kern_cuda_malloc(&dp->pend, dev_undo_wofs(h.total) + h.total * w) != DC_OK) {
            dp->pend = NULL;
            return dev_stage(n, c, DEV_WHY_CTX_UNDO);
        }
        dp->pend_count = h.total;
        upos = dp->pend;
        uxor = (uint8_t *)dp->pend + dev_undo_wofs(h.total);
    }
    if (journal && dc_journal_begin(n->rx.j, c) != DC_OK)
        return DC_DEV_FAIL;
    dc_kern_cuda_ctx_info_t info;
    st = dc_kern_cuda_ctx_run(dp->ctx, &h, vm, payload, dchunk, elems, (unsigned)w, 1, upos,
                              uxor, &info);
    if (st == DC_ERR_FORMAT) {
        dc_error_prefix("node %u: chunk %u of tensor '%s': ctx decoded on the device", n->me, c,
                        lt->name);
        return DC_DEV_BAD; /* checked before any write: untouched */
    }
    if (st != DC_OK)
        goto fail;
    dp->dev_bytes += info.h2d_bytes;
    dp->dev_ctx++;
    dp->ctx_host_classes += info.host_classes;
    dp->ctx_gaps_classes += info.dev_gaps_classes;
    dev_totals.dev_gaps += info.dev_gaps_classes;
    dp->ctx_host_values += (uint64_t)info.host_values;
    dev_totals.dev_ctx++;
    return DC_DEV_DONE;
fail:
    dc_error_prefix("node %u: chunk %u of tensor '%s' in device memory", n->me, c, lt->name);
    return DC_DEV_FAIL;
}

/* Decode `payload` (encoding enc) of chunk c and apply it to the chunk's
 * device bytes.  journal: set APPLYING first (a frame), or not (an undo).
 * undo_copy_needed: a put-dense chunk's old bytes go to a device undo
 * copy (dp->pend) first; keep_undo: a put-sparse or ctx chunk's undo
 * record goes to dp->pend.  Returns DC_DEV_*. */
static int dev_apply(dc_node_t *n, uint32_t c, uint16_t enc, const uint8_t *payload, size_t len,
                     int journal, int undo_copy_needed, int keep_undo)
{
    struct dc_devpath *dp = n->rx.dev;
    const dc_layout_chunk_t *lc = &n->layout->chunks[c];
    const dc_layout_tensor_t *lt = &n->layout->tensors[lc->tensor];
    const size_t w = lt->esize, elems = lc->len / w;
    unsigned kind = dc_enc_kind(enc);
    uint8_t *dchunk = dc_place_chunk_dev_ptr(&n->rx.place, c);
    if (!dchunk)
        return dev_stage(n, c, DEV_WHY_SPANS);
    if (kind == DC_ENC_CTX)
        return dev_ctx(n, c, enc, payload, len, journal, dchunk, elems, w, keep_undo);
    if (kind == DC_ENC_XOR_DENSE || kind == DC_ENC_PUT_DENSE) {
        void *copy = NULL;
        uint64_t sent = 0, zstd0 = dp->dd.host_zstd;
        int copying = kind == DC_ENC_PUT_DENSE && undo_copy_needed;
        int r = dc_devdense_apply(n, &dp->dd, c, enc, payload, len, journal, dchunk, elems,
                                  (unsigned)w, copying ? &copy : NULL, &sent);
        if (r == DC_DEV_STAGE)
            return dev_stage(n, c, DEV_WHY_UNDO_COPY);
        if (r == DC_DEV_BAD) {
            dc_error_prefix("node %u: chunk %u of tensor '%s': %s decoded on the device", n->me,
                            c, lt->name, dc_enc_kind_name(kind));
        } else if (r == DC_DEV_FAIL) {
            dc_error_prefix("node %u: chunk %u of tensor '%s' in device memory", n->me, c,
                            lt->name);
        }
        if (copy) {
            /* kept by dc_devpath_frame once the chunk changed */
            dc_kern_cuda_free(dp->pend);
            dp->pend = copy;
            dp->pend_count = lc->len;
            dp->pend_copy = 1;
            dev_totals.dev_copies++;
        }
        if (r == DC_DEV_DONE) {
            dp->dev_bytes += sent;
            if (dp->dd.host_zstd != zstd0)
                dev_totals.host_zstd++;
            else
                dev_totals.dev_dense++;
        }
        return r;
    }
    if (kind != DC_ENC_XOR_SPARSE && kind != DC_ENC_PUT_SPARSE) {
        (void)dc_error(DC_ERR_FORMAT, "node %u: chunk %u of tensor '%s': bad chunk encoding "
                       "0x%04x", n->me, c, lt->name, enc);
        return DC_DEV_BAD;
    }
    int r = dev_sparse(n, c, enc, payload, len, journal, dchunk, elems, w, keep_undo);
    if (r != DEV_HOST_VALUES)
        return r;
    /* zstd values: the lists decoded on the host (its verdicts), sent */
    const uint32_t *pos;
    const uint8_t *words;
    size_t count;
    if (dc_codec_decode_lists(n->rx.codec, enc, payload, len, elems, (unsigned)w, &pos, &words,
                              &count) != DC_OK)
        return DC_DEV_BAD; /* nothing changed yet */
    size_t pos_bytes = count * sizeof(uint32_t), word_bytes = count * w;
    if (pos_bytes + word_bytes >= 2 * (size_t)lc->len)
        return dev_stage(n, c, DEV_WHY_LISTS);
    const size_t wofs = (pos_bytes + 15) & ~(size_t)15;
    dc_status_t st = DC_OK;
    if (count > 0 &&
        ((st = dev_scratch(dp, wofs + word_bytes)) != DC_OK ||
         (st = dc_kern_cuda_h2d(dp->dbuf, pos, pos_bytes)) != DC_OK ||
         (st = dc_kern_cuda_h2d((uint8_t *)dp->dbuf + wofs, words, word_bytes)) != DC_OK))
        goto fail;
    if (kind == DC_ENC_PUT_SPARSE) {
        if ((r = dev_put_words(n, c, dchunk, w, dp->dbuf, (uint8_t *)dp->dbuf + wofs, count,
                               keep_undo)) == DC_DEV_FAIL)
            goto fail;
        if (r != DC_DEV_DONE)
            return r;
    }
    if (journal && dc_journal_begin(n->rx.j, c) != DC_OK)
        return DC_DEV_FAIL;
    if (count > 0) {
        st = dc_kern_cuda_xor_scatter(dchunk, elems, (unsigned)w, dp->dbuf,
                                      (uint8_t *)dp->dbuf + wofs, count, NULL);
        if (st == DC_ERR_FORMAT)
            return DC_DEV_BAD; /* validated before any write: untouched */
        if (st != DC_OK)
            goto fail;
    }
    dp->dev_bytes += pos_bytes + word_bytes;
    dp->dd.host_zstd++;
    dev_totals.host_zstd++;
    return DC_DEV_DONE;
fail:
    dc_error_prefix("node %u: chunk %u of tensor '%s' in device memory", n->me, c, lt->name);
    return DC_DEV_FAIL;
}

int dc_devpath_digest(dc_node_t *n, uint32_t c, dc_digest_t *d)
{
    const dc_layout_chunk_t *lc = &n->layout->chunks[c];
    uint8_t *dchunk = dc_place_chunk_dev_ptr(&n->rx.place, c);
    if (!dchunk)
        return DC_DEV_STAGE;
    if (dc_kern_cuda_digest128_dev(dchunk, lc->len, d, NULL) != DC_OK) {
        dc_error_prefix("node %u: digest of chunk %u in device memory", n->me, c);
        return DC_DEV_FAIL;
    }
    return DC_DEV_DONE;
}

/* Drop the pending undo record (not kept). */
static void dev_pend_drop(struct dc_devpath *dp)
{
    dc_kern_cuda_free(dp->pend);
    dp->pend = NULL;
    dp->pend_count = 0;
    dp->pend_copy = 0;
}

int dc_devpath_frame(dc_node_t *n, uint32_t c, const dc_frame_hdr_t *fh, const uint8_t *payload,
                     int state, dc_digest_t *d)
{
    struct dc_devpath *dp = n->rx.dev;
    int undo_copy = state == DC_JSTATE_PENDING && n->rx.cur.on_base &&
                    n->rx.cur.mode == DC_MODE_DELTA && !n->rx.undo[c];
    /* a ctx or put-sparse frame's undo record, kept where the host path
     * keeps its undo frame: delta mode, the digest matched */
    int keep_undo = n->rx.cur.mode == DC_MODE_DELTA;
    unsigned kind = dc_enc_kind(fh->encoding);
    dev_totals.frames++;
    dev_totals.payload += fh->payload_len;
    dev_pend_drop(dp);
    int r = dev_apply(n, c, fh->encoding, payload, fh->payload_len, 1, undo_copy, keep_undo);
    if (r != DC_DEV_DONE && !(r == DC_DEV_FAIL && dp->pend_copy)) {
        dev_pend_drop(dp); /* the chunk is untouched */
        return r;
    }
    if (dp->pend_copy) {
        /* a put-dense chunk's undo copy: the chunk changed (or may have),
         * the copy holds its baseline whatever its digest says now, as
         * the host path's undo copy does */
        dev_undo_drop(dp, c);
        dp->undo[c] = dp->pend;
        dp->undo_count[c] = dp->pend_count;
        dp->undo_copy[c] = 1;
        dp->pend = NULL;
        dp->pend_count = 0;
        dp->pend_copy = 0;
        if (r != DC_DEV_DONE)
            return r;
    }
    r = dc_devpath_digest(n, c, d);
    if (r == DC_DEV_DONE) {
        dp->dev_chunks++;
        if ((kind == DC_ENC_CTX || kind == DC_ENC_PUT_SPARSE) && keep_undo &&
            dc_digest_eq(*d, fh->target_digest)) {
            dev_undo_drop(dp, c);
            dp->undo[c] = dp->pend ? dp->pend : (void *)&dev_undo_none;
            dp->undo_count[c] = dp->pend_count;
            dp->pend = NULL;
            dp->pend_count = 0;
        }
    }
    dev_pend_drop(dp);
    return r == DC_DEV_STAGE ? DC_DEV_FAIL : r;
}

int dc_devpath_apply_test(dc_node_t *n, uint32_t c, uint16_t enc, const uint8_t *payload,
                          size_t len, int delta)
{
    struct dc_devpath *dp = n->rx.dev;
    dev_pend_drop(dp);
    int r = dev_apply(n, c, enc, payload, len, 0, delta, delta);
    if (delta && (r == DC_DEV_DONE || dp->pend_copy) &&
        (dp->pend_copy || dc_enc_kind(enc) == DC_ENC_CTX ||
         dc_enc_kind(enc) == DC_ENC_PUT_SPARSE)) {
        dev_undo_drop(dp, c);
        dp->undo[c] = dp->pend ? dp->pend : (void *)&dev_undo_none;
        dp->undo_count[c] = dp->pend_count;
        dp->undo_copy[c] = (uint8_t)dp->pend_copy;
        dp->pend = NULL;
        dp->pend_count = 0;
        dp->pend_copy = 0;
    }
    dev_pend_drop(dp);
    return r;
}

int dc_devpath_undo(dc_node_t *n, uint32_t c)
{
    struct dc_devpath *dp = n->rx.dev;
    if (dp->undo[c] && dp->undo_copy[c]) {
        /* a put-dense chunk's copy of its old bytes, device to device */
        const dc_layout_chunk_t *lc = &n->layout->chunks[c];
        const dc_layout_tensor_t *lt = &n->layout->tensors[lc->tensor];
        uint8_t *dchunk = dc_place_chunk_dev_ptr(&n->rx.place, c);
        dc_status_t st = dchunk ? dc_devdense_restore(dchunk, dp->undo[c], lc->len)
                                : dc_error(DC_ERR_INVALID, "not one device segment");
        if (st != DC_OK) {
            dc_error_prefix("node %u: chunk %u of tensor '%s': undo copy on the device", n->me,
                            c, lt->name);
            return DC_DEV_FAIL;
        }
        dev_undo_drop(dp, c);
        dp->undone++;
        dev_totals.undone_rec++;
        return DC_DEV_DONE;
    }
    if (dp->undo[c]) {
        /* a ctx or put-sparse chunk's record: its XOR words at its
         * positions again */
        const dc_layout_chunk_t *lc = &n->layout->chunks[c];
        const dc_layout_tensor_t *lt = &n->layout->tensors[lc->tensor];
        uint8_t *dchunk = dc_place_chunk_dev_ptr(&n->rx.place, c);
        size_t cnt = dp->undo_count[c];
        dc_status_t st = !cnt     ? DC_OK
                         : dchunk ? dc_kern_cuda_xor_scatter(
                                      dchunk, lc->len / lt->esize, lt->esize, dp->undo[c],
                                      (uint8_t *)dp->undo[c] + dev_undo_wofs(cnt), cnt, NULL)
                                : dc_error(DC_ERR_INVALID, "not one device segment");
        if (st != DC_OK) {
            dc_error_prefix("node %u: chunk %u of tensor '%s': undo record on the device", n->me,
                            c, lt->name);
            return st == DC_ERR_FORMAT ? DC_DEV_BAD : DC_DEV_FAIL;
        }
        dev_undo_drop(dp, c);
        dp->undone++;
        dev_totals.undone_ctx++; /* (ctx and put-sparse records) */
        dev_totals.undone_rec++;
        return DC_DEV_DONE;
    }
    dc_frame_hdr_t fh;
    if (dc_frame_decode(n->rx.retained[c], n->rx.retained_len[c], &fh) != DC_OK)
        return DC_DEV_BAD;
    int r = dev_apply(n, c, fh.encoding, n->rx.retained[c] + DC_FRAME_HEADER_SIZE, fh.payload_len,
                      0, 0, 0);
    if (r == DC_DEV_DONE)
        dp->undone++;
    return r;
}
