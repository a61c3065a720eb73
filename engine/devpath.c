/* devpath.c - device-side apply for receivers in device memory (devpath.h). */
#include "engine/devpath.h"

#include "kernels/entropy.h"
#include "kernels/kern_cuda.h"

#include <stdlib.h>
#include <string.h>

enum {
    DEV_WHY_CTX,
    DEV_WHY_PUT_SPARSE,
    DEV_WHY_SPANS,
    DEV_WHY_LISTS,
    DEV_WHY_UNDO_COPY,
    DEV_WHY_N
};

static const char *const dev_why[DEV_WHY_N] = {
    "ctx payloads decode against the baseline's bytes (no device decoder yet)",
    "put-sparse payloads decode against the baseline's bytes (no device decoder yet)",
    "the chunk spans several placement segments",
    "its position/word lists are not smaller than staging the chunk",
    "a put-dense chunk in delta mode needs an undo copy of its old bytes",
};

struct dc_devpath {
    void *dbuf; /* device scratch: positions then words */
    size_t dbuf_cap;
    uint64_t dev_chunks, dev_bytes; /* applied on the device, bytes sent there */
    uint64_t staged[DEV_WHY_N];
    uint64_t undone;
    uint64_t dev_values;    /* xor-sparse chunks whose values were decoded on the device */
    uint64_t dev_positions; /* ... and their (Golomb) positions too */
};

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
    if (!n->rx.dev)
        return dc_error(DC_ERR_NOMEM, "node %u: out of memory", n->me);
    DC_LOG_INFO("node %u: weights in device memory: xor-sparse, xor-dense and put-dense "
                "chunks are applied and digested on the device (xor-sparse: Golomb "
                "positions and the values decoded on the device from the compact streams, "
                "gaps positions and zstd values on the host; dense kinds: decoded on the "
                "host, the words cross PCIe); ctx and put-sparse chunks are staged through "
                "the host (whole chunk both ways)",
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
                "there; values decoded there for %llu, positions for %llu), %llu undone "
                "there, %llu staged through the host (ctx %llu, put-sparse %llu, spanning "
                "segments %llu, lists too large %llu, undo copy %llu)",
                n->me, (unsigned long long)dp->dev_chunks, (unsigned long long)dp->dev_bytes,
                (unsigned long long)dp->dev_values, (unsigned long long)dp->dev_positions,
                (unsigned long long)dp->undone,
                (unsigned long long)staged,
                (unsigned long long)dp->staged[DEV_WHY_CTX],
                (unsigned long long)dp->staged[DEV_WHY_PUT_SPARSE],
                (unsigned long long)dp->staged[DEV_WHY_SPANS],
                (unsigned long long)dp->staged[DEV_WHY_LISTS],
                (unsigned long long)dp->staged[DEV_WHY_UNDO_COPY]);
    dc_kern_cuda_free(dp->dbuf);
    free(dp);
    n->rx.dev = NULL;
}

/* Staging for reason `why`: counted, and said the first time per node. */
static int dev_stage(dc_node_t *n, uint32_t c, int why)
{
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

enum { DEV_HOST_VALUES = -1 };

/* An xor-sparse payload: positions decoded on the host, the compact values
 * stream sent as it is and decoded on the device
 * (dc_kern_cuda_values_decode, the CPU decoder's verdict), then
 * dc_kern_cuda_xor_scatter.  Everything before the scatter writes only
 * scratch, so a refused payload leaves the chunk untouched.  Returns
 * DC_DEV_*, or DEV_HOST_VALUES for zstd values (no device decoder: the
 * caller decodes the values on the host). */
static int dev_sparse(dc_node_t *n, uint32_t c, uint16_t enc, const uint8_t *payload,
                      size_t len, int journal, uint8_t *dchunk, size_t elems, size_t w)
{
    struct dc_devpath *dp = n->rx.dev;
    const dc_layout_chunk_t *lc = &n->layout->chunks[c];
    const dc_layout_tensor_t *lt = &n->layout->tensors[lc->tensor];
    const unsigned vm = dc_enc_val_method(enc);
    if (vm == DC_ENT_ZSTD)
        return DEV_HOST_VALUES;
    /* Golomb positions are decoded on the device too (their stream and
     * the values stream, contiguous in the payload, cross as they are);
     * gaps positions on the host (count x 4 bytes cross) */
    const int dev_pos = dc_enc_pos_method(enc) == DC_ENT_GOLOMB;
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
    const size_t pos_bytes = count * sizeof(uint32_t), vlen = len - vofs;
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
    if (dev_pos) {
        if ((st = dc_kern_cuda_h2d((uint8_t *)dp->dbuf + sofs, payload + pofs, plen + vlen)) !=
            DC_OK)
            goto fail;
        st = dc_kern_cuda_golomb_decode((uint8_t *)dp->dbuf + sofs, plen, count, elems,
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
    dp->dev_bytes += sent;
    dp->dev_values++;
    dp->dev_positions += dev_pos;
    return DC_DEV_DONE;
fail:
    dc_error_prefix("node %u: chunk %u of tensor '%s' in device memory", n->me, c, lt->name);
    return DC_DEV_FAIL;
}

/* Decode `payload` (encoding enc) of chunk c and apply it to the chunk's
 * device bytes.  journal: set APPLYING first (a frame), or not (an undo).
 * Returns DC_DEV_*. */
static int dev_apply(dc_node_t *n, uint32_t c, uint16_t enc, const uint8_t *payload, size_t len,
                     int journal, int undo_copy_needed)
{
    struct dc_devpath *dp = n->rx.dev;
    const dc_layout_chunk_t *lc = &n->layout->chunks[c];
    const dc_layout_tensor_t *lt = &n->layout->tensors[lc->tensor];
    const size_t w = lt->esize, elems = lc->len / w;
    unsigned kind = dc_enc_kind(enc);
    if (kind == DC_ENC_CTX)
        return dev_stage(n, c, DEV_WHY_CTX);
    if (kind == DC_ENC_PUT_SPARSE)
        return dev_stage(n, c, DEV_WHY_PUT_SPARSE);
    if (kind == DC_ENC_PUT_DENSE && undo_copy_needed)
        return dev_stage(n, c, DEV_WHY_UNDO_COPY);
    uint8_t *dchunk = dc_place_chunk_dev_ptr(&n->rx.place, c);
    if (!dchunk)
        return dev_stage(n, c, DEV_WHY_SPANS);
    if (kind == DC_ENC_XOR_SPARSE) {
        int r = dev_sparse(n, c, enc, payload, len, journal, dchunk, elems, w);
        if (r != DEV_HOST_VALUES)
            return r;
    }
    const uint32_t *pos;
    const uint8_t *words;
    size_t count;
    if (dc_codec_decode_lists(n->rx.codec, enc, payload, len, elems, (unsigned)w, &pos, &words,
                              &count) != DC_OK)
        return DC_DEV_BAD; /* nothing changed yet */
    size_t pos_bytes = pos ? count * sizeof(uint32_t) : 0, word_bytes = count * w;
    if (pos && pos_bytes + word_bytes >= 2 * (size_t)lc->len)
        return dev_stage(n, c, DEV_WHY_LISTS);
    if (journal && dc_journal_begin(n->rx.j, c) != DC_OK)
        return DC_DEV_FAIL;
    dc_status_t st = DC_OK;
    if (kind == DC_ENC_PUT_DENSE) {
        st = dc_kern_cuda_h2d(dchunk, words, word_bytes);
    } else if (count > 0) {
        size_t wofs = (pos_bytes + 15) & ~(size_t)15;
        if ((st = dev_scratch(dp, wofs + word_bytes)) == DC_OK &&
            (!pos || (st = dc_kern_cuda_h2d(dp->dbuf, pos, pos_bytes)) == DC_OK) &&
            (st = dc_kern_cuda_h2d((uint8_t *)dp->dbuf + wofs, words, word_bytes)) == DC_OK) {
            if (pos) {
                st = dc_kern_cuda_xor_scatter(dchunk, elems, (unsigned)w, dp->dbuf,
                                              (uint8_t *)dp->dbuf + wofs, count, NULL);
                if (st == DC_ERR_FORMAT)
                    return DC_DEV_BAD; /* validated before any write: untouched */
            } else {
                st = dc_kern_cuda_xor_dense(dchunk, (uint8_t *)dp->dbuf + wofs, word_bytes, NULL);
            }
        }
    }
    if (st != DC_OK) {
        dc_error_prefix("node %u: chunk %u of tensor '%s' in device memory", n->me, c, lt->name);
        return DC_DEV_FAIL;
    }
    dp->dev_bytes += pos_bytes + word_bytes;
    return DC_DEV_DONE;
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

int dc_devpath_frame(dc_node_t *n, uint32_t c, const dc_frame_hdr_t *fh, const uint8_t *payload,
                     int state, dc_digest_t *d)
{
    int undo_copy = state == DC_JSTATE_PENDING && n->rx.cur.on_base &&
                    n->rx.cur.mode == DC_MODE_DELTA && !n->rx.undo[c];
    int r = dev_apply(n, c, fh->encoding, payload, fh->payload_len, 1, undo_copy);
    if (r != DC_DEV_DONE)
        return r;
    r = dc_devpath_digest(n, c, d);
    if (r == DC_DEV_DONE)
        n->rx.dev->dev_chunks++;
    return r == DC_DEV_STAGE ? DC_DEV_FAIL : r;
}

int dc_devpath_undo(dc_node_t *n, uint32_t c)
{
    dc_frame_hdr_t fh;
    if (dc_frame_decode(n->rx.retained[c], n->rx.retained_len[c], &fh) != DC_OK)
        return DC_DEV_BAD;
    int r = dev_apply(n, c, fh.encoding, n->rx.retained[c] + DC_FRAME_HEADER_SIZE, fh.payload_len,
                      0, 0);
    if (r == DC_DEV_DONE)
        n->rx.dev->undone++;
    return r;
}
